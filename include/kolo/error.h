// Errors of kolo's public API.
//
// Inside the runtime and transports errors travel as Status values; at the public API
// they become a kolo::Error exception (blocking calls, Handle::wait) carrying a code and
// a message that names the tensor, the ranks and the values involved.
#pragma once

#include <stdexcept>
#include <string>

namespace kolo {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // bad input detected on one rank (bad root, bad dtype for the op, ...)
  kMismatch,         // ranks disagree about a tensor (shape, dtype, op, root, scale, device)
  kDuplicateName,    // a name is already in flight on this rank
  kNotInitialized,   // an operation before kolo::init() or after kolo::shutdown()
  kPeerFailure,      // another rank died or stopped answering within the peer timeout
  kStalled,          // the stall inspector ended the job (KOLO_STALL_SHUTDOWN_SECONDS)
  kShutdown,         // the runtime shut down while the operation was pending
  kUnsupported,      // the operation cannot run here (e.g. CUDA memory without an adapter)
  kInternal,         // a bug in kolo or its transport; please report it
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace kolo
