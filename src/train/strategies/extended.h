// What a strategy does inside Model's loops (TensorFlow's StrategyExtended): how a
// replica's loss is scaled, how the replicas' and workers' gradients and metric sums meet,
// which optimizer wrapper compile() builds, which callbacks fit adds, and whether fit runs
// a loop of its own. fit.cc calls these and never asks which strategy it has.
//
// Three implementations (extended.cc), one per family:
//   - all-reduce (default, OneDevice, Mirrored, MultiWorkerMirrored): TensorFlow's rules.
//     Losses divided by num_replicas_in_sync and gradients SUMMED; the local replicas' sums
//     meet in replica 0, then across the workers (with one replica per worker through
//     kolo::DistributedOptimizer, overlapped with backward); the metric sums of every step
//     are summed over the workers, so every worker logs the exact values.
//   - Horovod: one replica per process, gradients AVERAGED by DistributedOptimizer, the
//     epoch's logs averaged by MetricAverage (Horovod's Keras callback), nothing per step.
//   - parameter servers: fit is ps_fit.cc's loop (the chief schedules, workers push).
//
// Not for: the strategies' public handles and replicas (strategy.h, strategy.cc), the
// parameter-server tasks (parameter_server.cc).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "kolo/torch.h"
#include "kolo/train/callbacks.h"
#include "kolo/train/model.h"

namespace kolo::train {

class StrategyExtended {
 public:
  virtual ~StrategyExtended() = default;

  // fit's own loop, when the strategy has one (parameter servers); nullopt: Model's.
  virtual std::optional<History> fit(Model& model, Model::Impl& m, const Dataset& data,
                                     const FitOptions& o) const;

  // compile(): the DistributedOptimizer that reduces replica 0's gradients over the
  // workers during backward, or null when the step reduces them (reduce_gradients).
  virtual std::unique_ptr<DistributedOptimizer> distributed_optimizer(Model::Impl& m) const;

  // fit's callbacks that go before the progress bar (so that it shows what they change).
  virtual std::vector<CallbackPtr> leading_callbacks() const;
  // A user's callback whose work the strategy does already: the warning that says so
  // (fit logs it once and leaves the callback out); nullptr to keep it.
  virtual const char* redundant_callback(const Callback& c) const;

  // --- one training step (fit.cc's train_step) ---
  // What a replica's mean loss is divided by.
  virtual double loss_divisor(const Model::Impl& m) const;
  // Starts summing the step's metric state over the workers (before backward, so that it
  // is negotiated while the gradients are computed); nullopt when it is not summed.
  virtual std::optional<TorchHandle> start_metric_sum(const Model::Impl& m,
                                                      const std::vector<double>& state) const;
  // After backward: replica 0's gradients hold what the optimizer applies, except for
  // what distributed_optimizer()'s hooks reduce.
  virtual void reduce_gradients(Model::Impl& m) const;
  // The optimizer's step on replica 0 (through the DistributedOptimizer when there is one).
  void apply_gradients(Model::Impl& m) const;
};

// The families above.
std::shared_ptr<const StrategyExtended> all_reduce_extended();
std::shared_ptr<const StrategyExtended> horovod_extended();
std::shared_ptr<const StrategyExtended> parameter_server_extended();

}  // namespace kolo::train
