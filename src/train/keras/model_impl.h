// Model's state, shared by model.cc (construction, compile, TrainingHost) and fit.cc
// (the fit/evaluate/predict loops).
//
// Threads: a Model is used by one thread at a time (as Keras's); during a step the
// strategy's replica threads each touch only their own replica's module and state.
// Not for: the public interface (include/kolo/train/model.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kolo/torch.h"
#include "kolo/train/model.h"
#include "kolo/train/parameter_server.h"

namespace kolo::train {

// The callbacks of one call: Keras's order (the progress bar first, History last), with
// the strategy's own (the Horovod strategy's metric averaging) before everything else.
struct CallbackList {
  std::vector<CallbackPtr> all;
  std::shared_ptr<History> history;
  void init(TrainingHost* host, const TrainParams& params) {
    for (auto& c : all) {
      c->set_host(host);
      c->set_params(params);
    }
  }
  template <typename F>
  void each(F&& f) {
    for (auto& c : all) f(*c);
  }
};

// `strategy` (null for evaluate and predict) adds its leading callbacks and leaves out the
// user's that it makes redundant (StrategyExtended).
class StrategyExtended;
CallbackList make_callbacks(const std::vector<CallbackPtr>& user, int verbose,
                            const StrategyExtended* strategy, bool history);

// fit with a ParameterServerStrategy (ps_fit.cc): the chief schedules the steps, workers
// and ps tasks serve until the chief ends the job.
History fit_with_parameter_servers(Model& model, Model::Impl& m,
                                   ParameterServerStrategy::PsImpl& ps, const Dataset& data,
                                   const FitOptions& o);

struct Model::Impl {
  Impl(Strategy s, Forward f) : strategy(std::move(s)), forward(std::move(f)) {}
  Strategy strategy;
  // strategy's state (strategy_impl.h): its `extended` part is what fit asks of it.
  std::shared_ptr<const Strategy::Impl> strategy_impl;
  Forward forward;
  // replicas[0] is the user's module; the others are clones on the other devices.
  std::vector<std::shared_ptr<torch::nn::Module>> replicas;
  std::vector<std::string> param_names, buffer_names;
  std::vector<std::vector<torch::Tensor>> params, buffers;  // [replica][i]

  bool compiled = false;
  std::unique_ptr<torch::optim::Optimizer> optimizer;  // over replica 0's parameters
  std::optional<OptimizerSpec> optimizer_spec;         // compile()'s (ps tasks apply it)
  // Gradients across workers with one replica per worker (overlapped with backward).
  std::unique_ptr<DistributedOptimizer> distributed;
  LossPtr loss;
  std::vector<MetricSpec> metric_specs;
  std::vector<MetricPtr> metrics;   // resolved at the first batch
  std::vector<int> metric_offsets;  // into a state vector: [loss sum, count, metrics...]
  int state_size = 2;

  bool stop = false;
  std::int64_t iterations = 0;
  int resume_epoch = -1;
  std::uint64_t ops = 0;  // names this model's collectives (the same sequence on every worker)

  int local() const { return static_cast<int>(replicas.size()); }
  int workers() const { return strategy.num_workers(); }
  std::string op_name(const std::string& what) {
    return "train." + what + "." + std::to_string(ops++);
  }
  // Replica 0's parameters and buffers -> every other replica.
  void copy_to_replicas();
  // Called before the first batch: resolves "accuracy" & co. from the shapes.
  void resolve_metrics(const torch::Tensor& x, const torch::Tensor& y);
  // Sums per-worker state vectors over the workers (a no-op with one).
  std::vector<double> sum_over_workers(const std::vector<double>& state);
  Logs logs_of(const std::vector<double>& state, const std::string& prefix = "") const;
};

}  // namespace kolo::train
