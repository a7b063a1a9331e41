// Keras's built-in callbacks that act on the logs and the learning rate (History,
// EarlyStopping, LearningRateScheduler, ReduceLROnPlateau, CSVLogger, TerminateOnNaN) and
// Horovod's (LearningRateWarmup, BroadcastGlobalVariables, MetricAverage), with Keras's
// and Horovod's rules and messages (callbacks.h; docs/callbacks.md).
//
// Every decision is a function of the logs and the host's values, which are the same on
// every worker, so every worker decides the same; only the chief prints and writes.
//
// Not for: the callbacks that write checkpoints (checkpoint_callbacks.cc), the progress
// bar, TensorBoard.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/logging.h"
#include "kolo/error.h"
#include "kolo/train/callbacks.h"
#include "train/keras/callback_util.h"

namespace kolo::train {

using internal::chief_print;
using internal::py_float;
using internal::strprintf;

// --- History ------------------------------------------------------------------------------

void History::on_train_begin(Logs& /*logs*/) {
  history.clear();
  epochs.clear();
}

void History::on_epoch_end(int epoch, Logs& logs) {
  epochs.push_back(epoch);
  for (const auto& [name, value] : logs) history[name].push_back(value);
}

// --- EarlyStopping ------------------------------------------------------------------------

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : o_(std::move(options)) {
  greater_ = internal::monitor_greater("EarlyStopping", o_.mode, o_.monitor);
  // Keras keeps min_delta signed in the direction of improvement.
  o_.min_delta = greater_ ? std::fabs(o_.min_delta) : -std::fabs(o_.min_delta);
}

bool EarlyStopping::is_improvement(double value, double reference) const {
  return greater_ ? value - o_.min_delta > reference : value - o_.min_delta < reference;
}

void EarlyStopping::on_train_begin(Logs& /*logs*/) {
  wait_ = 0;
  stopped_epoch_ = 0;
  best_epoch_ = 0;
  best_ = greater_ ? -INFINITY : INFINITY;
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, Logs& logs) {
  const std::optional<double> current = logs.get(o_.monitor);
  if (!current) {
    if (host().is_chief()) {
      KOLO_LOG(kWarning, "train") << "Early stopping conditioned on metric `" << o_.monitor
                                  << "` which is not available. Available metrics are: "
                                  << internal::log_names(logs);
    }
    return;
  }
  if (epoch < o_.start_from_epoch) return;  // the warm-up: not monitored yet
  if (o_.restore_best_weights && best_weights_.empty()) {
    // So that the end restores something even if no epoch ever improves.
    best_weights_ = host().get_weights();
    best_epoch_ = epoch;
  }
  ++wait_;
  if (is_improvement(*current, best_)) {
    best_ = *current;
    best_epoch_ = epoch;
    if (o_.restore_best_weights) best_weights_ = host().get_weights();
    // Only an epoch that also beats the baseline restarts the wait.
    if (!o_.baseline || is_improvement(*current, *o_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= o_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    host().set_stop_training(true);
  }
}

void EarlyStopping::on_train_end(Logs& /*logs*/) {
  if (stopped_epoch_ > 0 && o_.verbose > 0) {
    chief_print(host(), strprintf("Epoch %d: early stopping", stopped_epoch_ + 1));
  }
  // As tf-keras: the best weights come back whether or not training stopped early.
  if (o_.restore_best_weights && !best_weights_.empty()) {
    if (o_.verbose > 0) {
      chief_print(host(), strprintf("Restoring model weights from the end of the best epoch: %d.",
                                    best_epoch_ + 1));
    }
    host().set_weights(best_weights_);
  }
}

// --- LearningRateScheduler ----------------------------------------------------------------

LearningRateScheduler::LearningRateScheduler(std::function<double(int epoch, double lr)> schedule,
                                             int verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {
  if (!schedule_) {
    throw Error(ErrorCode::kInvalidArgument, "LearningRateScheduler: the schedule is empty");
  }
}

void LearningRateScheduler::on_epoch_begin(int epoch, Logs& /*logs*/) {
  const double old_lr = host().learning_rate();
  const double lr = schedule_(epoch, old_lr);
  if (!std::isfinite(lr) || lr < 0) {
    throw Error(ErrorCode::kInvalidArgument, "LearningRateScheduler: schedule(epoch " +
                                                 std::to_string(epoch) + ", lr " +
                                                 py_float(old_lr) + ") returned " + py_float(lr) +
                                                 "; it must return a finite learning rate >= 0");
  }
  host().set_learning_rate(lr);
  if (verbose_ > 0) {
    chief_print(host(), "\nEpoch " + std::to_string(epoch + 1) +
                            ": LearningRateScheduler setting learning rate to " + py_float(lr) +
                            ".");
  }
}

void LearningRateScheduler::on_epoch_end(int /*epoch*/, Logs& logs) {
  logs.set("lr", host().learning_rate());
}

// --- ReduceLROnPlateau --------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(ReduceLROnPlateauOptions options) : o_(std::move(options)) {
  if (!(o_.factor < 1.0)) {
    throw Error(ErrorCode::kInvalidArgument,
                "ReduceLROnPlateau does not support a factor >= 1.0. Got " + py_float(o_.factor));
  }
  greater_ = internal::monitor_greater("ReduceLROnPlateau", o_.mode, o_.monitor);
  best_ = greater_ ? -INFINITY : INFINITY;
}

void ReduceLROnPlateau::on_train_begin(Logs& /*logs*/) {
  best_ = greater_ ? -INFINITY : INFINITY;
  wait_ = 0;
  cooldown_counter_ = 0;
}

void ReduceLROnPlateau::on_epoch_end(int epoch, Logs& logs) {
  logs.set("lr", host().learning_rate());  // the rate this epoch ran with
  const std::optional<double> current = logs.get(o_.monitor);
  if (!current) {
    if (host().is_chief()) {
      KOLO_LOG(kWarning, "train") << "Learning rate reduction is conditioned on metric `"
                                  << o_.monitor
                                  << "` which is not available. Available metrics are: "
                                  << internal::log_names(logs);
    }
    return;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    wait_ = 0;
  }
  const bool improved =
      greater_ ? *current > best_ + o_.min_delta : *current < best_ - o_.min_delta;
  if (improved) {
    best_ = *current;
    wait_ = 0;
    return;
  }
  if (cooldown_counter_ > 0) return;
  if (++wait_ < o_.patience) return;
  const double old_lr = host().learning_rate();
  if (!(old_lr > o_.min_lr)) return;  // already at the floor: nothing to reduce
  const double new_lr = std::max(old_lr * o_.factor, o_.min_lr);
  host().set_learning_rate(new_lr);
  if (o_.verbose > 0) {
    chief_print(host(), "\nEpoch " + std::to_string(epoch + 1) +
                            ": ReduceLROnPlateau reducing learning rate to " + py_float(new_lr) +
                            ".");
  }
  cooldown_counter_ = o_.cooldown;
  wait_ = 0;
}

// --- CSVLogger ----------------------------------------------------------------------------

namespace {

// Python's csv (excel dialect, QUOTE_MINIMAL): quote a field holding the separator, a
// quote or a line break, doubling its quotes.
std::string csv_field(const std::string& text, char separator) {
  if (text.find_first_of(std::string{separator, '"', '\r', '\n'}) == std::string::npos) {
    return text;
  }
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  return out + "\"";
}

}  // namespace

void CSVLogger::FileCloser::operator()(std::FILE* file) const { std::fclose(file); }

CSVLogger::CSVLogger(std::string filename, std::string separator, bool append)
    : filename_(std::move(filename)), separator_(std::move(separator)), append_(append) {
  if (filename_.empty()) throw Error(ErrorCode::kInvalidArgument, "CSVLogger: filename is empty");
  if (separator_.size() != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "CSVLogger: the separator must be one character, got \"" + separator_ + "\"");
  }
}

void CSVLogger::on_train_begin(Logs& /*logs*/) {
  header_written_ = false;
  if (!host().is_chief()) return;
  if (append_) {
    // As Keras: a header only when the file is missing or its first line is empty.
    std::ifstream in(filename_);
    std::string first;
    header_written_ = in && std::getline(in, first) && !first.empty();
  }
  file_.reset(std::fopen(filename_.c_str(), append_ ? "ab" : "wb"));
  if (!file_) {
    throw Error(ErrorCode::kInvalidArgument, "CSVLogger: cannot open " + filename_ + " for " +
                                                 (append_ ? "appending" : "writing") + ": " +
                                                 std::strerror(errno));
  }
}

void CSVLogger::on_epoch_end(int epoch, Logs& logs) {
  if (keys_.empty()) {
    for (const auto& [name, value] : logs) keys_.push_back(name);
    std::sort(keys_.begin(), keys_.end());
    // As Keras: without validation in the first epoch, room for "val_" columns anyway
    // (validation_freq > 1 adds them later).
    const bool has_val = std::any_of(keys_.begin(), keys_.end(),
                                     [](const std::string& k) { return k.rfind("val_", 0) == 0; });
    if (!has_val) {
      const std::size_t n = keys_.size();
      for (std::size_t i = 0; i < n; ++i) keys_.push_back("val_" + keys_[i]);
    }
  }
  if (!file_) return;  // not the chief
  const char sep = separator_[0];
  // Python's csv module ends rows with "\r\n" (the excel dialect), and so does Keras's file.
  std::string text;
  if (!header_written_) {
    text += "epoch";
    for (const auto& key : keys_) text += sep + csv_field(key, sep);
    text += "\r\n";
    header_written_ = true;
  }
  text += std::to_string(epoch);
  for (const auto& key : keys_) {
    const std::optional<double> value = logs.get(key);
    text += sep + csv_field(value ? py_float(*value) : "NA", sep);
  }
  text += "\r\n";
  if (std::fwrite(text.data(), 1, text.size(), file_.get()) != text.size() ||
      std::fflush(file_.get()) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "CSVLogger: cannot write " + filename_ + ": " + std::strerror(errno));
  }
}

void CSVLogger::on_train_end(Logs& /*logs*/) { file_.reset(); }

// --- TerminateOnNaN -----------------------------------------------------------------------

void TerminateOnNaN::on_train_batch_end(int batch, Logs& logs) {
  const std::optional<double> loss = logs.get("loss");
  if (loss && !std::isfinite(*loss)) {
    chief_print(host(), strprintf("Batch %d: Invalid loss, terminating training", batch));
    host().set_stop_training(true);
  }
}

// --- LearningRateWarmup (Horovod) ---------------------------------------------------------

LearningRateWarmup::LearningRateWarmup(LearningRateWarmupOptions options) : o_(std::move(options)) {
  if (!(o_.initial_lr > 0) || !std::isfinite(o_.initial_lr)) {
    throw Error(ErrorCode::kInvalidArgument,
                "LearningRateWarmup: initial_lr is required (the learning rate after the "
                "warm-up, > 0), got " +
                    py_float(o_.initial_lr));
  }
  if (o_.warmup_epochs <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "LearningRateWarmup: warmup_epochs must be > 0, got " +
                                                 std::to_string(o_.warmup_epochs));
  }
  if (o_.steps_per_epoch && *o_.steps_per_epoch <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "LearningRateWarmup: steps_per_epoch must be > 0, got " +
                    std::to_string(*o_.steps_per_epoch));
  }
}

void LearningRateWarmup::on_train_begin(Logs& /*logs*/) {
  steps_ = o_.steps_per_epoch.value_or(params().steps);
  if (steps_ <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "LearningRateWarmup: the number of steps per epoch is unknown (fit's steps is " +
                    std::to_string(params().steps) +
                    "); pass steps_per_epoch to LearningRateWarmupOptions or fit");
  }
  restore_momentum_.reset();
}

void LearningRateWarmup::on_epoch_begin(int epoch, Logs& /*logs*/) { epoch_ = epoch; }

void LearningRateWarmup::on_train_batch_begin(int batch, Logs& /*logs*/) {
  if (epoch_ >= o_.warmup_epochs) return;  // the warm-up is over
  // Horovod counts the batch as done (+1) so that each epoch ends on a round number.
  const double epoch = epoch_ + static_cast<double>(batch + 1) / static_cast<double>(steps_);
  const double size = host().num_replicas_in_sync();
  const double new_lr = o_.initial_lr / size * (epoch * (size - 1) / o_.warmup_epochs + 1);
  const double old_lr = host().learning_rate();
  host().set_learning_rate(new_lr);
  const std::optional<double> momentum = host().momentum();
  // Goyal et al.'s momentum correction, for this batch only (Horovod skips a momentum of 0).
  if (o_.momentum_correction && momentum && *momentum != 0 && old_lr != 0) {
    restore_momentum_ = *momentum;
    host().set_momentum(*momentum * new_lr / old_lr);
  }
}

void LearningRateWarmup::on_train_batch_end(int /*batch*/, Logs& /*logs*/) {
  if (restore_momentum_) {
    host().set_momentum(*restore_momentum_);
    restore_momentum_.reset();
  }
}

void LearningRateWarmup::on_epoch_end(int epoch, Logs& logs) {
  logs.set("lr", host().learning_rate());
  if (epoch == o_.warmup_epochs - 1 && o_.verbose > 0) {
    chief_print(host(), strprintf("\nEpoch %d: finished gradual learning rate warmup to %g.",
                                  epoch + 1, host().learning_rate()));
  }
}

// --- BroadcastGlobalVariables, MetricAverage (Horovod) ------------------------------------

void BroadcastGlobalVariables::on_train_batch_end(int /*batch*/, Logs& /*logs*/) {
  if (done_) return;
  host().broadcast_weights_from_chief();
  done_ = true;
}

void MetricAverage::on_epoch_end(int /*epoch*/, Logs& logs) {
  // Name order, so that every worker reduces the same values in the same slots.
  std::vector<std::string> names;
  std::vector<double> values;
  for (const auto& [name, value] : logs) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) values.push_back(*logs.get(name));
  const std::vector<double> averaged = host().average_over_workers(values);
  if (averaged.size() != values.size()) {
    throw Error(ErrorCode::kInternal, "MetricAverage: average_over_workers returned " +
                                          std::to_string(averaged.size()) + " values for " +
                                          std::to_string(values.size()));
  }
  for (std::size_t i = 0; i < names.size(); ++i) logs.set(names[i], averaged[i]);
}

}  // namespace kolo::train
