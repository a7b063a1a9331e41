// Test helper: a TrainingHost without a model, for driving callbacks the way fit() does.
// Its weights are a few named tensors; learning rate, momentum and stop flag are plain
// values; save()/load() really write and read files (kolo::save_archive, so atomically,
// and only when `chief`); every call a callback makes is recorded for the test to check.
// drive_fit() runs the hooks in Keras's loop order (on_train_begin, per epoch
// on_epoch_begin, per batch on_train_batch_begin/end, on_epoch_end, on_train_end), with
// the logs a test chooses, honouring stop_training and resume_at_epoch.
//
// Not for: numerics or multi-worker behaviour (one process; average_over_workers is
// whatever the test sets).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "kolo/torch.h"
#include "kolo/train/callback.h"

namespace kolo::train::testing {

class FakeHost : public TrainingHost {
 public:
  using Weights = std::vector<std::pair<std::string, torch::Tensor>>;

  FakeHost() { set_weights_to(0); }

  // Every weight filled with `value` (so a test can tell which epoch's weights it sees).
  void set_weights_to(float value) {
    weights = {{"w", torch::full({2, 3}, value)}, {"b", torch::full({3}, value)}};
  }
  float weight_value() const { return weights.at(0).second.flatten()[0].item<float>(); }

  bool stop_training() const override { return stop; }
  void set_stop_training(bool s) override { stop = s; }
  double learning_rate() const override { return lr; }
  void set_learning_rate(double value) override {
    lr = value;
    lr_sets.push_back(value);
  }
  std::optional<double> momentum() const override { return momentum_value; }
  void set_momentum(double m) override {
    momentum_value = m;
    momentum_sets.push_back(m);
  }
  Weights get_weights() const override {
    Weights copy;
    for (const auto& [name, t] : weights) copy.emplace_back(name, t.clone());
    return copy;
  }
  void set_weights(const Weights& w) override {
    weights.clear();
    for (const auto& [name, t] : w) weights.emplace_back(name, t.clone());
    ++set_weights_calls;
  }

  void save(const std::string& path, bool weights_only,
            const std::vector<std::pair<std::string, double>>& extra = {}) const override {
    saves.push_back(path);
    if (!chief) return;
    torch::serialize::OutputArchive archive;
    for (const auto& [name, t] : weights) archive.write("weight_" + name, t);
    archive.write("weights_only", torch::IValue(weights_only));
    if (!weights_only) {
      archive.write("lr", torch::IValue(lr));
      for (const auto& [name, value] : extra) archive.write("extra_" + name, torch::IValue(value));
    }
    kolo::save_archive(archive, path);
  }
  std::vector<std::pair<std::string, double>> load(const std::string& path,
                                                   bool weights_only) override {
    loads.push_back(path);
    torch::serialize::InputArchive archive;
    kolo::load_archive(archive, path);
    std::vector<std::pair<std::string, double>> extra;
    for (auto& [name, t] : weights) archive.read("weight_" + name, t);
    if (weights_only) return extra;
    torch::IValue v;
    archive.read("lr", v);
    lr = v.toDouble();
    for (const std::string& key : archive.keys()) {
      if (key.rfind("extra_", 0) != 0) continue;
      archive.read(key, v);
      extra.emplace_back(key.substr(6), v.toDouble());
    }
    return extra;
  }

  bool is_chief() const override { return chief; }
  int num_workers() const override { return workers; }
  int num_replicas_in_sync() const override { return replicas; }
  std::int64_t iterations() const override { return steps_taken; }
  void resume_at_epoch(int epoch) override { resumed_at = epoch; }
  std::vector<double> average_over_workers(const std::vector<double>& values) override {
    averaged.push_back(values);
    return average ? average(values) : values;
  }
  void broadcast_weights_from_chief() override { ++broadcasts; }

  // What a test sets.
  Weights weights;
  double lr = 0.1;
  std::optional<double> momentum_value;
  bool stop = false;
  bool chief = true;
  int workers = 1;
  int replicas = 1;
  std::int64_t steps_taken = 0;
  std::function<std::vector<double>(const std::vector<double>&)> average;  // default: identity

  // What the callbacks did.
  std::vector<double> lr_sets, momentum_sets;
  int set_weights_calls = 0;
  mutable std::vector<std::string> saves;  // every save() call's path, chief or not
  std::vector<std::string> loads;
  std::vector<std::vector<double>> averaged;
  std::optional<int> resumed_at;
  int broadcasts = 0;
};

// The logs of one epoch (on_epoch_end) and, optionally, of each of its batches.
struct EpochLogs {
  Logs epoch;
  std::vector<Logs> batches;  // empty: `steps` batches with empty logs
};

// What drive_fit ran: the epochs, in order.
struct FitRun {
  std::vector<int> epochs;
};

// Runs `callbacks` as fit(epochs = params.epochs, initial_epoch = params.initial_epoch)
// would, with params.steps batches per epoch; `logs_for(epoch)` gives each epoch's logs.
// Before each hook of batch b, `before_batch(epoch, b)` may change the host (a loss, the
// weights as "training" would).
inline FitRun drive_fit(FakeHost& host, const std::vector<CallbackPtr>& callbacks,
                        TrainParams params, const std::function<EpochLogs(int epoch)>& logs_for,
                        const std::function<void(int epoch, int batch)>& before_batch = {}) {
  FitRun run;
  for (const auto& cb : callbacks) {
    cb->set_host(&host);
    cb->set_params(params);
  }
  host.stop = false;
  host.resumed_at.reset();
  Logs train_logs;
  for (const auto& cb : callbacks) cb->on_train_begin(train_logs);
  const int first = host.resumed_at.value_or(params.initial_epoch);
  for (int epoch = first; epoch < params.epochs; ++epoch) {
    EpochLogs logs = logs_for(epoch);
    Logs begin_logs;
    for (const auto& cb : callbacks) cb->on_epoch_begin(epoch, begin_logs);
    for (int b = 0; b < params.steps; ++b) {
      Logs batch_logs = b < static_cast<int>(logs.batches.size()) ? logs.batches[b] : Logs{};
      for (const auto& cb : callbacks) cb->on_train_batch_begin(b, batch_logs);
      if (before_batch) before_batch(epoch, b);
      ++host.steps_taken;
      for (const auto& cb : callbacks) cb->on_train_batch_end(b, batch_logs);
      if (host.stop) break;
    }
    for (const auto& cb : callbacks) cb->on_epoch_end(epoch, logs.epoch);
    run.epochs.push_back(epoch);
    if (host.stop) break;
  }
  for (const auto& cb : callbacks) cb->on_train_end(train_logs);
  return run;
}

}  // namespace kolo::train::testing
