// HandleState: what a Handle (include/kolo/handle.h) shares with the runtime.
//
// The caller's Handle copies read it; the runtime's background thread fills the results
// and calls complete() exactly once. Not for: the public API (users see only Handle).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "kolo/handle.h"

namespace kolo::detail {

struct HandleState;

// What a blocking wait() may do before it sleeps: run the runtime's negotiation cycles on
// the waiting thread (Runtime's caller-run cycles). It returns when the handle finished,
// or when this thread cannot or should not go on (then wait() sleeps as usual).
class CycleHelper {
 public:
  virtual ~CycleHelper() = default;
  virtual void help(const HandleState& state) = 0;
};

struct HandleState {
  std::string name;  // set before the handle is returned; constant afterwards
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done KOLO_GUARDED_BY(mu) = false;
  // `done`, readable without the mutex (a helping waiter polls it); set with it.
  std::atomic<bool> finished{false};
  // The runtime's, set before the handle is returned; empty once the runtime is gone.
  std::weak_ptr<CycleHelper> helper;
  ErrorCode code KOLO_GUARDED_BY(mu) = ErrorCode::kOk;
  std::string message KOLO_GUARDED_BY(mu);
  // Results: written by the background thread before complete(), read by callers after
  // it (the mutex in complete() and wait() orders them).
  Tensor output;
  std::vector<std::int64_t> received_splits;
  int last_joined_rank = -1;
  int process_set_id = -1;  // add_process_set: the new set's id
  Handle::Times times KOLO_GUARDED_BY(mu);
  // Memory the operation reads or writes, owned by an adapter: released with the last
  // reference to this state (after completion), so a caller may drop its Handle early.
  std::shared_ptr<void> keep_alive KOLO_GUARDED_BY(mu);
  // Device memory (the device path): the event that marks the device work writing the
  // outputs (Handle::device_event), and its owner. Set before complete().
  void* device_event = nullptr;
  std::shared_ptr<void> device_event_owner;

  void mark_started();
  void complete(ErrorCode code, std::string message);
};

}  // namespace kolo::detail
