#include "common/status.h"

namespace kolo {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kMismatch:
      return "mismatch between ranks";
    case ErrorCode::kDuplicateName:
      return "duplicate name";
    case ErrorCode::kNotInitialized:
      return "not initialized";
    case ErrorCode::kPeerFailure:
      return "peer failure";
    case ErrorCode::kStalled:
      return "stalled";
    case ErrorCode::kShutdown:
      return "shut down";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kInternal:
      return "internal error";
    case ErrorCode::kWorkersChanged:
      return "workers changed";
  }
  return "unknown error";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(error_code_name(code_)) + ": " + message_;
}

void throw_error(ErrorCode code, const std::string& message) {
  if (code == ErrorCode::kWorkersChanged) throw WorkersChanged(message);
  throw Error(code, message);
}

void Status::throw_if_error() const {
  if (!ok()) throw_error(code_, message_);
}

}  // namespace kolo
