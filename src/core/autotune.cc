#include "core/autotune.h"

#include <algorithm>

namespace kolo::core {

std::vector<std::int64_t> Autotuner::default_fusion_thresholds(std::int64_t max_bytes) {
  std::vector<std::int64_t> grid;
  for (std::int64_t mib : {1, 4, 16, 64}) {
    if (mib << 20 < max_bytes) grid.push_back(mib << 20);
  }
  grid.push_back(max_bytes);  // the configured value itself (0: fusion stays off)
  return grid;
}

std::vector<double> Autotuner::default_cycle_times_ms() { return {0.0, 0.5, 1.0, 2.5, 5.0}; }

Autotuner::Autotuner(const Tunables& start, AutotuneOptions options)
    : options_(std::move(options)), current_(start) {
  if (options_.fusion_thresholds.empty()) {
    options_.fusion_thresholds = default_fusion_thresholds(start.fusion_threshold_bytes);
  }
  if (options_.cycle_times_ms.empty()) options_.cycle_times_ms = default_cycle_times_ms();
  options_.warmup_samples = std::max(1, options_.warmup_samples);  // the start values are sample 0
  options_.cycles_per_sample = std::max(1, options_.cycles_per_sample);
  if (!options_.log_path.empty()) {
    log_ = std::fopen(options_.log_path.c_str(), "w");
    if (log_) {
      std::fputs(
          "sample,phase,fusion_threshold_bytes,cycle_time_ms,hierarchical,bytes,seconds,"
          "bytes_per_second\n",
          log_);
      std::fflush(log_);
    }
  }
  for (int i = 0; i < options_.warmup_samples; ++i) queue_.push_back(current_);
}

Autotuner::~Autotuner() {
  if (log_) std::fclose(log_);
}

void Autotuner::log(const AutotuneSample& s, const char* phase) {
  if (!log_) return;
  std::fprintf(log_, "%zu,%s,%lld,%.3f,%d,%.0f,%.6f,%.1f\n", samples_.size(), phase,
               static_cast<long long>(s.tunables.fusion_threshold_bytes), s.tunables.cycle_time_ms,
               s.tunables.hierarchical ? 1 : 0, s.bytes, s.seconds, s.score);
  std::fflush(log_);
}

std::optional<Tunables> Autotuner::observe(double bytes, double start_s, double end_s) {
  if (settled_) return std::nullopt;
  if (cycles_ == 0) first_start_ = start_s;
  ++cycles_;
  bytes_ += bytes;
  last_end_ = end_s;
  if (cycles_ < options_.cycles_per_sample) return std::nullopt;
  return finish_sample();
}

std::optional<Tunables> Autotuner::finish_sample() {
  AutotuneSample s;
  s.tunables = current_;
  s.bytes = bytes_;
  s.seconds = std::max(last_end_ - first_start_, 1e-9);
  s.score = s.bytes / s.seconds;
  s.warmup = phase_ == 0;
  samples_.push_back(s);
  log(s, s.warmup ? "warmup" : "search");
  cycles_ = 0;
  bytes_ = 0;
  if (!queue_.empty()) queue_.erase(queue_.begin());  // the candidate just measured
  return next_candidate();
}

// Moves to the next candidate (filling the queue for the next phase when one ends) and
// returns it if it differs from the current values.
std::optional<Tunables> Autotuner::next_candidate() {
  const Tunables before = current_;
  auto best = [this](auto keep) {
    const AutotuneSample* top = nullptr;
    for (const auto& s : samples_) {
      if (!s.warmup && keep(s) && (!top || s.score > top->score)) top = &s;
    }
    return top;
  };
  while (queue_.empty() && !settled_) {
    if (phase_ == 0) {
      phase_ = 1;
      for (auto t : options_.fusion_thresholds) {
        Tunables c = current_;
        c.fusion_threshold_bytes = t;
        queue_.push_back(c);
      }
    } else if (phase_ == 1) {
      phase_ = 2;
      const AutotuneSample* top = best([](const AutotuneSample&) { return true; });
      Tunables base = top ? top->tunables : current_;
      for (double ms : options_.cycle_times_ms) {
        Tunables c = base;
        c.cycle_time_ms = ms;
        if (c == base) continue;  // measured in phase 1 already
        queue_.push_back(c);
      }
    } else if (phase_ == 2 && options_.tune_hierarchical) {
      // The best so far with the other allreduce algorithm (hierarchical or flat).
      phase_ = 3;
      const AutotuneSample* top = best([](const AutotuneSample&) { return true; });
      Tunables c = top ? top->tunables : current_;
      c.hierarchical = !c.hierarchical;
      queue_.push_back(c);
    } else {
      phase_ = 4;
      settled_ = true;
      const AutotuneSample* top = best([](const AutotuneSample&) { return true; });
      if (top) current_ = top->tunables;
      AutotuneSample final_choice = top ? *top : AutotuneSample{current_, 0, 0, 0, false};
      log(final_choice, "settled");
    }
  }
  if (!queue_.empty()) current_ = queue_.front();
  if (current_ == before) return std::nullopt;
  return current_;
}

}  // namespace kolo::core
