// Progbar: the text of Keras's progress bar (tf.keras 2's keras.utils.Progbar) for one
// bar: from the step count, its target, the time and the values to the exact bytes to
// write. Pure: the caller passes the time, so every format is tested without a clock.
//
// Not for: when bars start and end, or where they go (ProgbarLogger, progbar.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kolo::train::internal {

struct ProgbarFormat {
  std::int64_t target = -1;  // steps in the bar; -1 unknown
  int width = 30;            // characters between the brackets
  int verbose = 1;           // 1: the bar, 2: one line at the end
  bool dynamic = false;      // redrawn in place ("\r"), else whole lines
  double interval = 0.05;    // least seconds between two updates shown (verbose 1)
  std::string unit = "step";
  // The names of the values shown as given; the others are averaged over the steps by
  // the bar (Keras's non-stateful values). nullopt: every value is shown as given.
  std::optional<std::set<std::string>> stateful;
};

class Progbar {
 public:
  using Values = std::vector<std::pair<std::string, double>>;

  // `start`: the time the bar began (seconds, the clock of every later `now`).
  Progbar(ProgbarFormat format, double start);

  // The text to write for the update at step `current` (counted from 1) at time `now`:
  // "" when nothing is due (verbose 1 within `interval` of the last update shown, verbose
  // 2 before the final update). `final` is the last update; its text ends in "\n".
  std::string update(std::int64_t current, const Values& values, bool final, double now);

  std::int64_t target() const { return f_.target; }
  void set_target(std::int64_t target) { f_.target = target; }

 private:
  double step_seconds(std::int64_t current, double now);
  std::string bar(std::int64_t current) const;
  // " - name: value" for every value so far; `magnitude`: Keras's verbose-1 rule for
  // "%.4e" (|v| <= 1e-3), else its verbose-2 rule (v <= 1e-3).
  std::string values_text(bool magnitude) const;

  ProgbarFormat f_;
  double start_;
  std::int64_t seen_ = 0;
  // Per value: the sum of value x steps and the steps (a stateful value: {value, 1}).
  std::vector<std::pair<std::string, std::pair<double, double>>> values_;
  std::size_t total_width_ = 0;  // of the last update shown
  double last_update_;
  std::optional<double> time_after_first_step_;
  double epoch_start_;
  std::optional<double> epoch_end_;
};

// Keras's duration texts. "1:02:03" above an hour, "2:05" above a minute, else "7s"
// (whole seconds, cut, not rounded).
std::string format_eta(double seconds);
// " 3s/step" from a second up (and for 0), " 12ms/step" from a millisecond, else
// " 250us/step" (rounded).
std::string format_per_unit(double seconds, const std::string& unit);
// "%.4f", or "%.4e" when `small`; NaN is "nan" (Python's spelling) whatever its sign.
std::string format_value(double value, bool small);

}  // namespace kolo::train::internal
