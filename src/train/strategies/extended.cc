// The strategies' parts of Model's loops (extended.h): the all-reduce family's rules as
// StrategyExtended's own, Horovod's and the parameter servers' as overrides.
#include "train/strategies/extended.h"

#include "kolo/error.h"
#include "kolo/kolo.h"
#include "train/keras/model_impl.h"
#include "train/strategies/strategy_impl.h"

namespace kolo::train {

// --- the all-reduce family (TensorFlow's rules) --------------------------------------------

std::optional<History> StrategyExtended::fit(Model&, Model::Impl&, const Dataset&,
                                             const FitOptions&) const {
  return std::nullopt;
}

namespace {

// With one replica per worker the optimizer's hooks start each gradient's allreduce (`op`)
// during backward; null with several replicas (the step reduces) or one worker. In an
// elastic job the workers may grow from one: it then reduces already.
std::unique_ptr<DistributedOptimizer> reducing_optimizer(Model::Impl& m, ReduceOp op) {
  if (m.local() != 1 || (m.workers() == 1 && !elastic_job(*m.strategy_impl))) return nullptr;
  DistributedOptimizerOptions o;
  o.op = op;
  o.broadcast_buffers = false;
  return std::make_unique<DistributedOptimizer>(*m.optimizer, *m.replicas[0], o);
}

}  // namespace

std::unique_ptr<DistributedOptimizer> StrategyExtended::distributed_optimizer(
    Model::Impl& m) const {
  return reducing_optimizer(m, ReduceOp::kSum);
}

std::vector<CallbackPtr> StrategyExtended::leading_callbacks() const { return {}; }

const char* StrategyExtended::redundant_callback(const Callback&) const { return nullptr; }

double StrategyExtended::loss_divisor(const Model::Impl& m) const {
  return m.strategy.num_replicas_in_sync();
}

std::optional<TorchHandle> StrategyExtended::start_metric_sum(
    const Model::Impl& m, const std::vector<double>& state) const {
  if (m.workers() == 1) return std::nullopt;
  return kolo::allreduce_async(torch::tensor(state, torch::kFloat64),
                               {.name = "train.metrics", .op = ReduceOp::kSum});
}

void StrategyExtended::reduce_gradients(Model::Impl& m) const {
  const int L = m.local();
  if (L == 1) return;  // one replica: its gradients are the step's (or the optimizer's hooks')
  // Each replica thread sums its share of the parameters into replica 0's gradients.
  const std::size_t n = m.params[0].size();
  m.strategy.for_each_replica([&](int share) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = static_cast<std::size_t>(share); i < n; i += static_cast<std::size_t>(L)) {
      torch::Tensor& g0 = m.params[0][i].mutable_grad();
      for (int r = 1; r < L; ++r) {
        const torch::Tensor& g = m.params[static_cast<std::size_t>(r)][i].grad();
        if (!g.defined()) continue;
        torch::Tensor here = g.to(m.params[0][i].device());
        if (g0.defined()) {
          g0.add_(here);
        } else {
          g0 = here.clone();
        }
      }
    }
  });
  if (m.workers() == 1) return;
  // Then over the workers: one allreduce per gradient, fused by the runtime.
  std::vector<TorchHandle> handles;
  for (std::size_t i = 0; i < n; ++i) {
    torch::Tensor& g = m.params[0][i].mutable_grad();
    if (!g.defined()) g = torch::zeros_like(m.params[0][i]);
    handles.push_back(kolo::allreduce_async_(
        g, {.name = "train.grad." + m.param_names[i], .op = ReduceOp::kSum}));
  }
  for (auto& h : handles) h.wait();
}

void StrategyExtended::apply_gradients(Model::Impl& m) const {
  if (m.distributed) {
    m.distributed->step();
  } else {
    m.optimizer->step();
  }
}

namespace {

// --- Horovod -------------------------------------------------------------------------------

class HorovodExtended : public StrategyExtended {
 public:
  std::unique_ptr<DistributedOptimizer> distributed_optimizer(Model::Impl& m) const override {
    if (m.local() != 1) {
      throw Error(ErrorCode::kInvalidArgument, "HorovodStrategy runs one replica per process");
    }
    return reducing_optimizer(m, ReduceOp::kAverage);
  }

  std::vector<CallbackPtr> leading_callbacks() const override {
    return {std::make_shared<MetricAverage>()};
  }

  // Horovod's callback list, as Horovod's Keras examples write it: what these callbacks
  // do is done already, so the copies are left out (a second MetricAverage would average
  // averages; a second broadcast costs one).
  const char* redundant_callback(const Callback& c) const override {
    if (dynamic_cast<const MetricAverage*>(&c) != nullptr) {
      return "Model::fit: HorovodStrategy's fit already averages the epoch's logs over the "
             "workers (it adds MetricAverage first): the MetricAverage in "
             "FitOptions::callbacks does nothing; remove it";
    }
    if (dynamic_cast<const BroadcastGlobalVariables*>(&c) != nullptr) {
      return "Model::fit: under HorovodStrategy every worker already starts from the "
             "chief's weights (the model broadcasts them when it is built and when weights "
             "are loaded, and every step applies the same averaged gradients): the "
             "BroadcastGlobalVariables in FitOptions::callbacks does nothing; remove it";
    }
    return nullptr;
  }

  // The optimizer averages: a replica's loss is its batch's mean.
  double loss_divisor(const Model::Impl&) const override { return 1.0; }

  // MetricAverage averages the epoch's logs instead.
  std::optional<TorchHandle> start_metric_sum(const Model::Impl&,
                                              const std::vector<double>&) const override {
    return std::nullopt;
  }
};

// --- parameter servers ---------------------------------------------------------------------

class ParameterServerExtended : public StrategyExtended {
 public:
  std::optional<History> fit(Model& model, Model::Impl& m, const Dataset& data,
                             const FitOptions& o) const override {
    if (o.elastic.enabled) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Model::fit: ParameterServerStrategy is not elastic: it has its own recovery "
                  "(kolorun --max-restarts restarts a failed worker; docs/ps.md); "
                  "FitOptions::elastic is for HorovodStrategy and MultiWorkerMirroredStrategy");
    }
    return fit_with_parameter_servers(model, m, *m.strategy_impl->ps, data, o);
  }
};

}  // namespace

std::shared_ptr<const StrategyExtended> all_reduce_extended() {
  static const auto shared = std::make_shared<const StrategyExtended>();
  return shared;
}

std::shared_ptr<const StrategyExtended> horovod_extended() {
  static const auto shared = std::make_shared<const HorovodExtended>();
  return shared;
}

std::shared_ptr<const StrategyExtended> parameter_server_extended() {
  static const auto shared = std::make_shared<const ParameterServerExtended>();
  return shared;
}

}  // namespace kolo::train
