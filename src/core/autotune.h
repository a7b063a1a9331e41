// Autotune: picks the fusion threshold and cycle time that move the most bytes per second
// for this job, during its first steps (KOLO_AUTOTUNE=1).
//
// Rank 0 feeds the tuner one observation per cycle that executed something (bytes
// reduced/moved, and the cycle's start and end). Observations are grouped into samples
// of `cycles_per_sample` busy cycles; a sample's score is its bytes divided by the wall
// time from its first cycle's start to its last cycle's end, so time spent waiting for the
// next batch of work (cycle time, stragglers) counts against a candidate. The search:
//   1. `warmup_samples` samples at the starting values, discarded (caches, allocator);
//   2. each fusion threshold of the grid at the starting cycle time;
//   3. each cycle time of the grid at the best threshold so far;
//   4. when the transport offers both (tune_hierarchical), the best so far with the other
//      allreduce algorithm: hierarchical (shm per host + the base transport across hosts) or flat;
//   5. settle on the best scored candidate and stop.
// Each change is returned to the caller, which broadcasts it (Controller::propose) so
// every rank switches between the same two cycles. Samples are also written as CSV lines
// to the log path, if one is given.
//
// Pure except for the optional log file; not thread-safe (the background thread owns it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/message.h"

namespace kolo::core {

struct AutotuneOptions {
  int warmup_samples = 3;  // at least 1
  int cycles_per_sample = 20;
  std::vector<std::int64_t> fusion_thresholds;  // empty: the default grid up to the start value
  std::vector<double> cycle_times_ms;           // empty: the default grid
  std::string log_path;                         // "" = no log
  bool tune_hierarchical = false;  // the transport can switch (Communicator::algorithm_switch)
};

struct AutotuneSample {
  Tunables tunables;
  double bytes = 0;
  double seconds = 0;
  double score = 0;  // bytes per second
  bool warmup = false;
};

class Autotuner {
 public:
  // `start`: the configured values; its fusion threshold bounds the grid (a larger buffer
  // than configured might not fit the transport's shared segment).
  Autotuner(const Tunables& start, AutotuneOptions options);
  ~Autotuner();
  Autotuner(const Autotuner&) = delete;
  Autotuner& operator=(const Autotuner&) = delete;

  // One busy cycle: `bytes` executed between `start_s` and `end_s` (seconds on any
  // monotonic clock). Returns the tunables to switch to when a sample completes and the
  // search moves on (or settles), else nothing.
  std::optional<Tunables> observe(double bytes, double start_s, double end_s);

  bool settled() const { return settled_; }
  const Tunables& current() const { return current_; }
  const std::vector<AutotuneSample>& samples() const { return samples_; }

  // The grids used when AutotuneOptions leaves them empty.
  static std::vector<std::int64_t> default_fusion_thresholds(std::int64_t max_bytes);
  static std::vector<double> default_cycle_times_ms();

 private:
  std::optional<Tunables> finish_sample();
  std::optional<Tunables> next_candidate();
  void log(const AutotuneSample& s, const char* phase);

  AutotuneOptions options_;
  Tunables current_;
  std::vector<Tunables> queue_;  // candidates still to measure, in order
  int phase_ = 0;  // 0 warm-up, 1 thresholds, 2 cycle times, 3 hierarchical, 4 settled
  bool settled_ = false;
  std::vector<AutotuneSample> samples_;
  // The sample being measured.
  int cycles_ = 0;
  double bytes_ = 0;
  double first_start_ = 0;
  double last_end_ = 0;
  std::FILE* log_ = nullptr;
};

}  // namespace kolo::core
