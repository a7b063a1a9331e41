// Timeline: a Chrome-trace JSON file of what the runtime did with each tensor.
//
// Rank 0 writes it (KOLO_TIMELINE=PATH at start-up, or kolo::start_timeline(path) /
// stop_timeline() at run time); other ranks record nothing. Each tensor name gets its own
// row, and each operation on it five consecutive phases (complete "X" events, durations in
// microseconds from the start of the file):
//   negotiate        enqueued -> end of the first cycle that carried the request
//   wait_for_ranks   -> end of the cycle in which every rank had submitted it (its
//                       response arrived); zero when all ranks were ready in one cycle
//   pack             copy into the fusion buffer with prescale (or input -> output copy)
//   communicate      the transport's collective (shared by every tensor of a fused buffer)
//   unpack           averaging/postscale and copy out of the fusion buffer
// With KOLO_TIMELINE_MARK_CYCLES=1 every negotiation cycle that did something adds an
// instant event. The file is a JSON array, flushed as it goes, so a crashed run still
// opens in Perfetto or chrome://tracing (both accept a missing closing bracket).
//
// Thread-safety: start()/stop() from any thread; record calls from the background thread
// only. Not for: metrics aggregation (autotune) or logging.
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/status.h"

namespace kolo::core {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  struct Phases {
    Clock::time_point enqueued, first_cycle_end, response, pack_start, comm_start, comm_end,
        unpack_end;
  };

  ~Timeline();

  // Opens `path` for writing (truncating it). Fails with a message naming the path.
  Status start(const std::string& path, bool mark_cycles);
  // Closes the JSON array and the file. No-op when not started.
  void stop();
  bool active() const;

  // One finished operation of tensor `name`: `op` ("allreduce", ...), its bytes.
  void record(const std::string& name, const char* op, std::int64_t bytes, const Phases& p);
  // A negotiation cycle (only with mark_cycles): its start and how many responses it had.
  void mark_cycle(Clock::time_point start, std::size_t responses);

 private:
  void write_event(const std::string& json);  // caller holds mu_
  int row(const std::string& name);           // caller holds mu_
  double us(Clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  }

  mutable std::mutex mu_;
  std::FILE* file_ = nullptr;                  // guarded by mu_
  bool mark_cycles_ = false;                   // guarded by mu_
  bool first_event_ = true;                    // guarded by mu_
  Clock::time_point origin_;                   // guarded by mu_
  Clock::time_point last_flush_;               // guarded by mu_
  std::unordered_map<std::string, int> rows_;  // guarded by mu_
};

}  // namespace kolo::core
