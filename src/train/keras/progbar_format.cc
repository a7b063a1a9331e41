// The text of one progress bar, as tf.keras 2's Progbar.update writes it (see
// progbar_format.h). The arithmetic keeps Keras's order of operations, so that the bar's
// width, the rounding of times and the switch between formats fall on the same steps.
#include "train/keras/progbar_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kolo::train::internal {
namespace {

std::string printf_text(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

// Decimal digits of `target` as Keras counts them: int(log10(target)) + 1.
int digits(std::int64_t target) {
  if (target < 1) return 1;
  return static_cast<int>(std::log10(static_cast<double>(target))) + 1;
}

std::string count_text(std::int64_t current, std::int64_t target) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%*lld/%lld", digits(target), static_cast<long long>(current),
                static_cast<long long>(target));
  return buf;
}

}  // namespace

std::string format_eta(double eta) {
  char buf[64];
  if (eta > 3600) {
    std::snprintf(buf, sizeof buf, "%d:%02d:%02d", static_cast<int>(std::floor(eta / 3600)),
                  static_cast<int>(std::floor(std::fmod(eta, 3600) / 60)),
                  static_cast<int>(std::fmod(eta, 60)));
  } else if (eta > 60) {
    std::snprintf(buf, sizeof buf, "%d:%02d", static_cast<int>(std::floor(eta / 60)),
                  static_cast<int>(std::fmod(eta, 60)));
  } else {
    std::snprintf(buf, sizeof buf, "%ds", static_cast<int>(eta));
  }
  return buf;
}

std::string format_per_unit(double t, const std::string& unit) {
  if (t >= 1 || t == 0) return printf_text(" %.0fs/", t) + unit;
  if (t >= 1e-3) return printf_text(" %.0fms/", t * 1000.0) + unit;
  return printf_text(" %.0fus/", t * 1000000.0) + unit;
}

std::string format_value(double value, bool small) {
  if (std::isnan(value)) return "nan";
  return printf_text(small ? "%.4e" : "%.4f", value);
}

Progbar::Progbar(ProgbarFormat format, double start)
    : f_(std::move(format)),
      start_(start),
      // Keras shows a redrawn bar's first update at once. Whole lines wait a full
      // interval (progbar.h): a line at step 1 says nothing in a log.
      last_update_(f_.dynamic ? -INFINITY : start),
      epoch_start_(start) {}

std::string Progbar::update(std::int64_t current, const Values& values, bool final, double now) {
  for (const auto& [name, v] : values) {
    auto it = values_.begin();
    while (it != values_.end() && it->first != name) ++it;
    if (it == values_.end()) it = values_.insert(values_.end(), {name, {0.0, 0.0}});
    if (!f_.stateful || f_.stateful->count(name) != 0) {
      it->second = {v, 1.0};
    } else {
      // Weighted by the steps since the last update (at least one: an epoch's end may
      // repeat the last step's count).
      const double steps = static_cast<double>(std::max<std::int64_t>(current - seen_, 1));
      it->second.first += v * steps;
      it->second.second += steps;
    }
  }
  seen_ = current;

  std::string info = printf_text(" - %.0fs", now - start_);
  if (current == f_.target) epoch_end_ = now;
  std::string message;
  if (f_.verbose == 1) {
    if (now - last_update_ < f_.interval && !final) return "";
    const std::size_t prev_total_width = total_width_;
    if (f_.dynamic) message += '\r';
    const std::string bar_text = bar(current);
    total_width_ = bar_text.size();
    message += bar_text;
    const double per_step = step_seconds(current, now);
    if (f_.target < 0 || final) {
      info += format_per_unit(per_step, f_.unit);
    } else {
      info = " - ETA: " + format_eta(per_step * static_cast<double>(f_.target - current));
    }
    info += values_text(/*magnitude=*/true);
    total_width_ += info.size();
    if (f_.dynamic && prev_total_width > total_width_) {
      info.append(prev_total_width - total_width_, ' ');
    }
    if (final || !f_.dynamic) info += '\n';
    message += info;
  } else if (f_.verbose == 2) {
    if (!final) return "";
    message = count_text(current, f_.target) + info + values_text(/*magnitude=*/false);
    if (epoch_end_) {
      const double epoch_seconds = *epoch_end_ - epoch_start_;
      const double per_step = f_.target > 0 ? epoch_seconds / static_cast<double>(f_.target) : 0;
      epoch_start_ = now;
      epoch_end_.reset();
      message += " -" + format_per_unit(epoch_seconds, "epoch");
      message += " -" + format_per_unit(per_step, f_.unit);
    }
    message += '\n';
  }
  last_update_ = now;
  return message;
}

double Progbar::step_seconds(std::int64_t current, double now) {
  if (current == 0) return 0;
  // The first step (graph building, warm-up) is left out of the estimate once there are
  // others.
  double t;
  if (time_after_first_step_ && current > 1) {
    t = (now - *time_after_first_step_) / static_cast<double>(current - 1);
  } else {
    t = (now - start_) / static_cast<double>(current);
  }
  if (current == 1) time_after_first_step_ = now;
  return t;
}

std::string Progbar::bar(std::int64_t current) const {
  if (f_.target < 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%7lld/Unknown", static_cast<long long>(current));
    return buf;
  }
  std::string text = count_text(current, f_.target) + " [";
  const double progress =
      f_.target > 0 ? static_cast<double>(current) / static_cast<double>(f_.target) : 1.0;
  const int filled = static_cast<int>(f_.width * progress);
  if (filled > 0) {
    text.append(static_cast<std::size_t>(filled - 1), '=');
    text += current < f_.target ? '>' : '=';
  }
  if (f_.width > filled) text.append(static_cast<std::size_t>(f_.width - filled), '.');
  return text + "]";
}

std::string Progbar::values_text(bool magnitude) const {
  std::string text;
  for (const auto& [name, sum] : values_) {
    const double avg = sum.first / std::max(1.0, sum.second);
    const bool small = magnitude ? !(std::fabs(avg) > 1e-3) : !(avg > 1e-3);
    text += " - " + name + ": " + format_value(avg, small);
  }
  return text;
}

}  // namespace kolo::train::internal
