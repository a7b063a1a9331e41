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
  // Elastic jobs only (kolorun --min-np/--max-np): a worker left, so this generation of
  // the job ended; kolo::elastic::run restores the last commit and goes on with the
  // workers that are left (kolo/elastic.h). Thrown as kolo::WorkersChanged.
  kWorkersChanged,
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// The error of every pending and later operation of an elastic job's generation after a
// worker left it (ErrorCode::kWorkersChanged; Horovod's HorovodInternalError). The
// message names the worker and how it ended.
class WorkersChanged : public Error {
 public:
  explicit WorkersChanged(const std::string& message)
      : Error(ErrorCode::kWorkersChanged, message) {}
};

// Throws WorkersChanged for kWorkersChanged, else Error (code must not be kOk).
[[noreturn]] void throw_error(ErrorCode code, const std::string& message);

}  // namespace kolo
