// Handle: the completion of one asynchronous kolo operation.
//
// Every *_async call returns a Handle. The operation runs on kolo's background thread;
// the handle says when it finished, whether it failed, and holds its results (the output
// tensor of allgather/alltoall/reducescatter, alltoall's received splits, join's last
// rank). Handles are cheap to copy; copies share state. CPU memory passed to the
// operation must stay valid until the handle completes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/error.h"
#include "kolo/types.h"

namespace kolo {

namespace detail {
struct HandleState;  // the runtime's side (src/core/handle_state.h)
}  // namespace detail

class Handle {
 public:
  using Clock = std::chrono::steady_clock;

  // When the operation was submitted, when its communication started (every rank had
  // submitted it), and when it finished. Unset points are Clock::time_point{}.
  struct Times {
    Clock::time_point enqueued;
    Clock::time_point started;
    Clock::time_point finished;
  };

  Handle() = default;
  explicit Handle(std::shared_ptr<detail::HandleState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  const std::string& name() const;

  // True once the operation finished, successfully or not. Never blocks.
  bool poll() const;
  // Blocks up to `timeout`; true if the operation finished in that time.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // Blocks until the operation finishes and throws kolo::Error if it failed. The runtime
  // bounds every operation (peer timeout, stall shutdown), so this does not hang forever.
  void wait() const;

  // Valid after completion.
  bool ok() const;
  ErrorCode error_code() const;
  std::string error_message() const;

  // Results (valid after successful completion).
  const Tensor& output() const;                              // allgather, alltoall, reducescatter
  Tensor& mutable_output();                                  // to move the result out
  const std::vector<std::int64_t>& received_splits() const;  // alltoall: rows from each rank
  int last_joined_rank() const;                              // join
  Times times() const;

  // For device memory run on the device path (kolo::has_device_path()): the handle
  // completes once the device work has been enqueued on kolo's stream, and this is the
  // device's own handle of an event (a cudaEvent_t) recorded after it; a stream of the
  // caller that reads the outputs must wait for it first (cudaStreamWaitEvent), as the
  // libtorch adapter's wait() does. Valid while a copy of this handle lives. Null for
  // host memory, which is ready when the handle completes.
  void* device_event() const;

  // Keeps `owner` alive as long as the operation may use memory it owns: until the
  // operation completed and the last copy of this handle is gone (for adapters).
  void keep_alive(std::shared_ptr<void> owner);

 private:
  std::shared_ptr<detail::HandleState> state_;
};

}  // namespace kolo
