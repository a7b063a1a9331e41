// Deadlines: every wait in kolo has one (a point on the steady clock), made from a
// number of seconds in one way.
//
// Durations from the configuration are bounded there (config.h: at most a week), so the
// conversions below cannot overflow for them; larger or non-finite values saturate at
// Clock::duration::max() instead of wrapping. Not for: wall-clock times (timeline
// timestamps, logs).
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>

namespace kolo {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// `s` seconds as a steady-clock duration (negative: zero).
inline Clock::duration seconds_duration(double s) {
  if (!(s > 0)) return Clock::duration::zero();
  const std::chrono::duration<double> d(s);
  if (d >= std::chrono::duration<double>(Clock::duration::max())) return Clock::duration::max();
  return std::chrono::duration_cast<Clock::duration>(d);
}

// The point `s` seconds from now (saturating at Deadline::max()).
inline Deadline deadline_after(double s) {
  const Clock::duration d = seconds_duration(s);
  const Deadline now = Clock::now();
  return d >= Deadline::max() - now ? Deadline::max() : now + d;
}

// The point `ns` nanoseconds from now (zero or less: now; saturating at Deadline::max()),
// for deadlines that arrive over a wire as nanoseconds left.
inline Deadline deadline_after_ns(std::int64_t ns) {
  const Deadline now = Clock::now();
  if (ns <= 0) return now;
  const auto d = std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns));
  return d >= Deadline::max() - now ? Deadline::max() : now + d;
}

}  // namespace kolo
