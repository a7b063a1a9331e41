// Model: a libtorch module trained Keras's way, compile/fit/evaluate/predict, on a
// strategy's replicas. Part of <kolo/train.h>.
//
//   kolo::train::Model model(net, strategy);     // net: a torch::nn::Sequential, ...
//   model.compile(kolo::train::Adam{}, std::make_shared<SparseCategoricalCrossentropy>(true),
//                 {"accuracy"});
//   kolo::train::History h = model.fit(x, y, {.epochs = 5});
//
// The module given is replica 0 (it is trained in place); the other local replicas are
// clones (Module::clone: the module must be Cloneable, as torch::nn's modules are).
// Under a multi-worker strategy every worker builds the same model, and the chief's
// weights go to every worker here (in an elastic job, at elastic fit's first sync instead:
// a worker that joins later must not broadcast while the others train).
//
// Not for: custom loops (Strategy::replicate / run / all_reduce_gradients / reduce, and
// checkpoint.h: docs/training.md, "Custom training loops"), the Horovod door's own loop
// (kolo::DistributedOptimizer).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "kolo/train/callback.h"
#include "kolo/train/callbacks.h"
#include "kolo/train/data.h"
#include "kolo/train/losses.h"
#include "kolo/train/metrics.h"
#include "kolo/train/optimizers.h"
#include "kolo/train/strategy.h"

namespace kolo::train {

// fit in an elastic job (kolorun --min-np MIN --max-np MAX; docs/elastic.md, "fit in an
// elastic job"): workers leave and join while fit runs. The survivors keep their process,
// go back to the last commit and go on; a new worker gets the state from a survivor. A
// commit is an in-memory snapshot of the model, the optimizer's state and options, the
// epoch, the batch within it and the epoch's metric state. After a change the rest of the
// epoch is split over the workers there are, with no example trained twice or skipped
// (the global batch stays batch_size). Callbacks see one on_train_begin/end and each
// epoch's begin and end once; batches after the last commit are done again, and their
// batch hooks run again.
// Requires HorovodStrategy or MultiWorkerMirroredStrategy and in-memory data (AutoShardPolicy
// kData or kAuto, not files); BackupAndRestore and BroadcastGlobalVariables are refused
// (the commits and the sync do their work). Outside an elastic job fit runs as plain fit
// (committing all the same), so one program runs anywhere; inside one, plain fit is refused.
struct ElasticFitOptions {
  bool enabled = false;  // default: plain fit
  // Commit every this many batches (and at each epoch's end). A failure loses the batches
  // since the last commit; a commit costs a copy of the weights and the optimizer's state
  // (Horovod's Keras examples commit every batch: that copy each step costs several
  // percent of a small model's step time; at 100 it is lost in the noise).
  std::int64_t commit_every = 100;
  // Run after each change of workers, before the sync, on the workers that were there
  // before (new ones get the learning rate and the rest from the sync): e.g. set the
  // learning rate for model.num_workers(). Set a value from the new size (lr = base * n),
  // do not scale the one there is. Empty: nothing (fit's batch_size is global, so the
  // step's batch does not change with the workers).
  std::vector<std::function<void()>> reset_callbacks{};
};

struct FitOptions {
  int epochs = 1;                // the epoch to stop before (with initial_epoch, as Keras)
  std::int64_t batch_size = 32;  // GLOBAL: over every replica of every worker
  int verbose = 1;               // 0 silent, 1 progress bar, 2 one line per epoch (chief)
  std::vector<CallbackPtr> callbacks{};
  double validation_split = 0;               // the LAST fraction of x, y, taken before shuffling
  std::optional<Dataset> validation_data{};  // takes precedence over validation_split
  bool shuffle = true;                       // a new order every epoch, the same on every worker
  std::uint64_t seed = 0;                    // of the shuffle (epoch e uses seed + e)
  int initial_epoch = 0;
  std::int64_t steps_per_epoch = -1;  // -1: until the data is used up
  std::int64_t validation_steps = -1;
  std::int64_t validation_batch_size = -1;  // -1: batch_size
  int validation_freq = 1;                  // validate every N epochs
  std::vector<int> validation_epochs{};     // or at these (1-based) epochs, as Keras's list
  ElasticFitOptions elastic{};              // default: not elastic
};

struct EvaluateOptions {
  std::int64_t batch_size = 32;
  int verbose = 1;
  std::int64_t steps = -1;
  std::vector<CallbackPtr> callbacks{};
};

struct PredictOptions {
  std::int64_t batch_size = 32;
  int verbose = 0;
  std::int64_t steps = -1;
  std::vector<CallbackPtr> callbacks{};
};

class Model : public TrainingHost {
 public:
  // A module holder (torch::nn::Sequential, torch::nn::Linear, TORCH_MODULE types).
  template <typename Impl>
  explicit Model(torch::nn::ModuleHolder<Impl> module, Strategy strategy = Strategy())
      : Model(module.ptr(), std::move(strategy)) {}
  // A module (a class deriving torch::nn::Cloneable<Impl> with forward(Tensor)).
  template <typename Impl>
  explicit Model(std::shared_ptr<Impl> module, Strategy strategy = Strategy())
      : Model(
            std::static_pointer_cast<torch::nn::Module>(module),
            [](torch::nn::Module& m, const torch::Tensor& x) {
              return dynamic_cast<Impl&>(m).forward(x);
            },
            std::move(strategy)) {}
  using Forward = std::function<torch::Tensor(torch::nn::Module&, const torch::Tensor&)>;
  Model(std::shared_ptr<torch::nn::Module> module, Forward forward, Strategy strategy);
  ~Model() override;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Keras's compile. Metrics appear in logs in this order after "loss".
  void compile(const OptimizerSpec& optimizer, const LossSpec& loss,
               const std::vector<MetricSpec>& metrics = {});

  // With options.elastic in an elastic job, a worker that kolorun removes (its host left
  // the discovery script's list) returns the History so far with kolo shut down: check
  // kolo::is_initialized() before using kolo (evaluate, predict) after fit.
  History fit(const torch::Tensor& x, const torch::Tensor& y, FitOptions options = {});
  History fit(const Dataset& data, FitOptions options = {});
  // "loss" and the metrics over the whole data (exact over replicas and workers).
  Logs evaluate(const torch::Tensor& x, const torch::Tensor& y, EvaluateOptions options = {});
  Logs evaluate(const Dataset& data, EvaluateOptions options = {});
  // The outputs for every example in order, on every worker (gathered over the workers).
  torch::Tensor predict(const torch::Tensor& x, PredictOptions options = {});
  torch::Tensor predict(const Dataset& data, PredictOptions options = {});

  torch::nn::Module& module();  // replica 0
  const Strategy& strategy() const;
  torch::optim::Optimizer& optimizer();  // after compile
  // "loss" then the metrics' names (known after the first batch: "accuracy" resolves then).
  std::vector<std::string> metrics_names() const;

  // TrainingHost (see callback.h).
  bool stop_training() const override;
  void set_stop_training(bool stop) override;
  double learning_rate() const override;
  void set_learning_rate(double lr) override;
  std::optional<double> momentum() const override;
  void set_momentum(double momentum) override;
  std::vector<std::pair<std::string, torch::Tensor>> get_weights() const override;
  void set_weights(const std::vector<std::pair<std::string, torch::Tensor>>& weights) override;
  void save(const std::string& path, bool weights_only,
            const std::vector<std::pair<std::string, double>>& extra = {}) const override;
  std::vector<std::pair<std::string, double>> load(const std::string& path,
                                                   bool weights_only) override;
  bool is_chief() const override;
  int num_workers() const override;
  int num_replicas_in_sync() const override;
  std::int64_t iterations() const override;
  void resume_at_epoch(int epoch) override;
  std::vector<double> average_over_workers(const std::vector<double>& values) override;
  void broadcast_weights_from_chief() override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::train
