// Status: how errors travel inside kolo's runtime and transports (no exceptions there).
//
// The public API turns a failed Status into a kolo::Error with the same code and message.
#pragma once

#include <string>
#include <utility>

#include "kolo/error.h"

namespace kolo {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

  // Throws kolo::Error when not ok.
  void throw_if_error() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status Mismatch(std::string m) { return {ErrorCode::kMismatch, std::move(m)}; }
inline Status PeerFailure(std::string m) { return {ErrorCode::kPeerFailure, std::move(m)}; }
inline Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

#define KOLO_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::kolo::Status kolo_status_ = (expr);        \
    if (!kolo_status_.ok()) return kolo_status_; \
  } while (0)

}  // namespace kolo
