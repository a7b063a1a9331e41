// Rate-limited warnings: a flood of one kind of event logs a few lines and then a count.
// Not for: ordinary logging (logging.h), which is cheap when off but never drops lines.
#pragma once

#include <chrono>
#include <string>

#include "common/deadline.h"
#include "common/logging.h"

namespace kolo {

// At most kShown lines of one kind of warning per kWindow; the rest are counted and said
// in one line when the next window opens (a flood of strangers or a full descriptor table
// once wrote 260 015 lines in 4 s).
class LogLimiter {
 public:
  // Summary lines are logged under `subsystem` ("store").
  explicit LogLimiter(const char* subsystem) : subsystem_(subsystem) {}
  static constexpr int kShown = 10;
  static constexpr auto kWindow = std::chrono::seconds(10);
  // True when this occurrence may be logged; `what` names the kind in the summary line.
  bool allow(const std::string& name, const char* what) {
    const Deadline now = Clock::now();
    if (now - since_ >= kWindow) {
      if (hidden_ > 0) {
        KOLO_LOG(kWarning, subsystem_) << name << ": " << hidden_ << " more " << what
                                       << " in the last " << kWindow.count() << " s (not shown)";
      }
      since_ = now;
      shown_ = hidden_ = 0;
    }
    if (shown_ < kShown) {
      ++shown_;
      return true;
    }
    ++hidden_;
    return false;
  }

 private:
  const char* subsystem_;
  Deadline since_{};
  int shown_ = 0;
  long hidden_ = 0;
};

}  // namespace kolo
