// The devices' bounded host waits (cuda_device.cc's synchronize, the stand-in's waits for
// another process's shared event): a query polled with a yield first (most waits are
// short), then sleeps that double from `first` up to 1 ms, until it says done or the
// deadline passes.
//
// Not for: waits that can block on a condition (the stand-in's own markers do).
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/deadline.h"
#include "common/status.h"

namespace kolo::device {

// OK once query(&done) sets done; query's error; or timed_out() at the deadline.
template <typename Query, typename TimedOut>
Status poll_until(Deadline deadline, std::chrono::microseconds first, Query query,
                  TimedOut timed_out) {
  auto pause = std::chrono::microseconds(0);
  for (;;) {
    bool done = false;
    KOLO_RETURN_IF_ERROR(query(&done));
    if (done) return Status::OK();
    if (Clock::now() >= deadline) return timed_out();
    if (pause.count() == 0) {
      std::this_thread::yield();
      pause = first;
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
}

}  // namespace kolo::device
