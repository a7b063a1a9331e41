// The callback interface of fit/evaluate/predict, with Keras's hooks, and TrainingHost:
// what a callback may see and change of the model being trained. Part of <kolo/train.h>.
//
// Every worker of a multi-worker job runs every callback with the same logs (metrics are
// reduced across replicas and workers before the hooks run), so decisions taken from the
// logs (stop, a new learning rate, "best so far") are the same on every worker. Only
// output (printing, files) is the chief's: a callback asks host().is_chief().
//
// Not for: the built-in callbacks (callbacks.h, progbar.h, summary.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "kolo/train/logs.h"

namespace kolo::train {

// What fit() tells its callbacks before on_train_begin (Keras's callback.params).
struct TrainParams {
  int epochs = 1;         // the last epoch, exclusive (fit's `epochs`)
  int initial_epoch = 0;  // fit's `initial_epoch`, or where BackupAndRestore resumed
  // Batches per epoch on each replica (every replica runs the same count); -1 unknown.
  std::int64_t steps = -1;
  int verbose = 1;  // 0 silent, 1 progress bar, 2 one line per epoch
  // The metric names of the logs in order ("loss", "accuracy", ...; "val_*" when
  // validating), as Keras's model.metrics_names.
  std::vector<std::string> metrics{};
};

// The model side that callbacks act on. Model implements it; tests may fake it.
class TrainingHost {
 public:
  virtual ~TrainingHost() = default;

  // fit() checks it after every batch and every epoch (Keras's model.stop_training).
  virtual bool stop_training() const = 0;
  virtual void set_stop_training(bool stop) = 0;

  // The optimizer's learning rate (its first parameter group's; setting it sets every
  // group's). Changes take effect at the next optimizer step.
  virtual double learning_rate() const = 0;
  virtual void set_learning_rate(double lr) = 0;
  // SGD's or RMSprop's momentum; nullopt for optimizers without one (Adam: none).
  virtual std::optional<double> momentum() const = 0;
  virtual void set_momentum(double momentum) = 0;

  // Copies of the trainable parameters and buffers in module order (get_weights), and
  // back (set_weights: every replica gets them). Names as the module's named_parameters()
  // then named_buffers().
  virtual std::vector<std::pair<std::string, torch::Tensor>> get_weights() const = 0;
  virtual void set_weights(const std::vector<std::pair<std::string, torch::Tensor>>& weights) = 0;

  // Writes the weights (weights_only) or the weights, the optimizer's state and `extra`
  // (BackupAndRestore's epoch) to `path`: on the chief only, atomically (a temporary file
  // renamed into place); a no-op on other workers. Throws kolo::Error naming the path.
  virtual void save(const std::string& path, bool weights_only,
                    const std::vector<std::pair<std::string, double>>& extra = {}) const = 0;
  // Loads what save() wrote: the chief reads `path` and every worker gets the same
  // values (no shared file system needed). Every worker must call it. Returns `extra`.
  virtual std::vector<std::pair<std::string, double>> load(const std::string& path,
                                                           bool weights_only) = 0;

  // The chief (TF's is_chief: task "chief", else worker 0; rank 0 under kolorun).
  virtual bool is_chief() const = 0;
  virtual int num_workers() const = 0;
  virtual int num_replicas_in_sync() const = 0;
  // Optimizer steps taken so far over every fit() of this model (Keras's
  // optimizer.iterations): TensorBoard's batch step.
  virtual std::int64_t iterations() const = 0;
  // Makes fit() start at `epoch` instead of its initial_epoch (BackupAndRestore, called
  // from on_train_begin).
  virtual void resume_at_epoch(int epoch) = 0;
  // The average of `values` over the workers (Horovod's MetricAverageCallback); every
  // worker must call it with the same number of values. Identity with one worker.
  virtual std::vector<double> average_over_workers(const std::vector<double>& values) = 0;
  // Broadcasts the weights from the chief to every replica of every worker (Horovod's
  // BroadcastGlobalVariablesCallback); every worker must call it.
  virtual void broadcast_weights_from_chief() = 0;
};

// Keras's Callback. Hooks get logs by reference: a callback may add entries ("lr") that
// later callbacks and History see. Batch numbers count from 0 within the epoch.
class Callback {
 public:
  virtual ~Callback() = default;

  void set_host(TrainingHost* host) { host_ = host; }
  void set_params(const TrainParams& params) { params_ = params; }
  TrainingHost& host() const { return *host_; }
  const TrainParams& params() const { return params_; }

  virtual void on_train_begin(Logs& /*logs*/) {}
  virtual void on_train_end(Logs& /*logs*/) {}
  virtual void on_epoch_begin(int /*epoch*/, Logs& /*logs*/) {}
  virtual void on_epoch_end(int /*epoch*/, Logs& /*logs*/) {}
  virtual void on_train_batch_begin(int /*batch*/, Logs& /*logs*/) {}
  virtual void on_train_batch_end(int /*batch*/, Logs& /*logs*/) {}
  virtual void on_test_begin(Logs& /*logs*/) {}
  virtual void on_test_end(Logs& /*logs*/) {}
  virtual void on_test_batch_begin(int /*batch*/, Logs& /*logs*/) {}
  virtual void on_test_batch_end(int /*batch*/, Logs& /*logs*/) {}
  virtual void on_predict_begin(Logs& /*logs*/) {}
  virtual void on_predict_end(Logs& /*logs*/) {}
  virtual void on_predict_batch_begin(int /*batch*/, Logs& /*logs*/) {}
  virtual void on_predict_batch_end(int /*batch*/, Logs& /*logs*/) {}

 private:
  TrainingHost* host_ = nullptr;
  TrainParams params_;
};

using CallbackPtr = std::shared_ptr<Callback>;

}  // namespace kolo::train
