// Model::fit with a ParameterServerStrategy (TensorFlow's Keras fit with
// ParameterServerStrategy): the chief schedules steps_per_epoch steps an epoch on the
// workers and logs per epoch; each worker's step pulls the parameters, trains one batch of
// its own shard of the data (batch_size examples: num_replicas_in_sync is 1, as TF's) and
// pushes the gradients; ps tasks serve their shards. Workers and ps tasks return an empty
// History when the chief ends the job.
//
// Choices (docs/ps.md): worker w of W reads examples w, w + W, ... of the data, repeated
// without end in full batches (ps_batches.h); epoch logs are exact sums of what
// the steps of the epoch returned (loss and metric states), not running averages; only
// epoch-level callback hooks are called (TF: batch hooks are not supported with this
// strategy); verbose 1 prints as 2 (TF's 'auto' under this strategy).
//
// Not for: the all-reduce strategies' loop (fit.cc), the strategy itself
// (parameter_server.cc).
#include <algorithm>
#include <numeric>
#include <random>

#include "common/logging.h"
#include "kolo/error.h"
#include "train/keras/model_impl.h"
#include "train/strategies/ps_batches.h"
#include "train/strategies/ps_impl.h"
#include "train/strategies/strategy_impl.h"

namespace kolo::train {
namespace {

constexpr char kStep[] = "kolo.fit.train_step";

// One step on this worker: the state vector [loss sum, count, metrics...] of its batch.
torch::Tensor worker_step(Model::Impl& m, ParameterServerStrategy::PsImpl& ps, const Dataset& data,
                          detail::WorkerBatches& batches) {
  ps.pull({});
  torch::nn::Module& module = *m.replicas[0];
  const torch::Tensor idx = batches.next();
  const torch::Tensor x = data.x().index_select(0, idx), y = data.y().index_select(0, idx);
  for (auto& p : m.params[0]) p.mutable_grad() = torch::Tensor();
  const torch::Tensor out = m.forward(module, x);
  const torch::Tensor per = m.loss->per_example(out, y);
  const torch::Tensor total = per.sum();
  (total / static_cast<double>(std::max<std::int64_t>(idx.numel(), 1))).backward();
  ps.push();
  std::vector<double> st(static_cast<std::size_t>(m.state_size), 0.0);
  st[0] = total.item<double>();
  st[1] = static_cast<double>(idx.numel());
  const torch::Tensor pred = out.detach();
  for (std::size_t i = 0; i < m.metrics.size(); ++i) {
    m.metrics[i]->accumulate(pred, y, &st[static_cast<std::size_t>(m.metric_offsets[i])]);
  }
  return torch::tensor(st, torch::kFloat64);
}

}  // namespace

History fit_with_parameter_servers(Model& model, Model::Impl& m,
                                   ParameterServerStrategy::PsImpl& ps, const Dataset& data,
                                   const FitOptions& o) {
  const std::string& type = ps.resolver.task_type();
  if (type == "ps") {
    ps.serve();
    return History();
  }
  if (type == "evaluator") {
    KOLO_LOG(kInfo, "ps") << ps.self << ": fit does nothing on the evaluator";
    return History();
  }
  if (o.steps_per_epoch <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "fit: steps_per_epoch is required with ParameterServerStrategy (TensorFlow's "
                "rule: the workers read their data without end, so an epoch is a number of steps)");
  }
  if (o.validation_data || o.validation_split > 0) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "fit: validation_data and validation_split are not supported with "
        "ParameterServerStrategy (as in TensorFlow); call evaluate() on the chief after fit");
  }
  if (data.file_based()) {
    throw Error(ErrorCode::kInvalidArgument,
                "fit: ParameterServerStrategy reads tensors (Dataset::from_tensors or from_idx), "
                "not a dataset of files");
  }
  if (o.batch_size < 1) throw Error(ErrorCode::kInvalidArgument, "fit: batch_size must be >= 1");
  if (!m.optimizer_spec) throw Error(ErrorCode::kInvalidArgument, "fit: call compile() first");
  m.resolve_metrics(data.x(), data.y());
  ps.bind(*m.replicas[0], *m.optimizer_spec, /*create=*/ps.is_chief());

  if (type == "worker") {
    const int workers = static_cast<int>(ps.resolver.cluster_spec().worker.size());
    auto batches = std::make_shared<detail::WorkerBatches>(
        data.size(), workers, ps.resolver.task_id(), o.batch_size, o.shuffle, o.seed);
    {
      std::lock_guard<std::mutex> lock(ps.mu);
      ps.steps[kStep] = [&m, &ps, data, batches](const torch::Tensor&) {
        return worker_step(m, ps, data, *batches);
      };
    }
    m.replicas[0]->train(true);
    ps.serve();
    return History();
  }

  // The chief.
  FitOptions eo = o;
  if (eo.verbose == 1) eo.verbose = 2;
  CallbackList callbacks = make_callbacks(eo.callbacks, eo.verbose, nullptr, true);
  TrainParams params;
  params.epochs = o.epochs;
  params.initial_epoch = o.initial_epoch;
  params.steps = o.steps_per_epoch;
  params.verbose = eo.verbose;
  params.metrics = model.metrics_names();
  callbacks.init(&model, params);
  ps::Coordinator& coordinator = ps.coordinator_for_chief();

  m.stop = false;
  m.resume_epoch = -1;
  Logs begin;
  callbacks.each([&](Callback& c) { c.on_train_begin(begin); });
  const int first = m.resume_epoch >= 0 ? m.resume_epoch : o.initial_epoch;
  Logs epoch_logs;
  for (int epoch = first; epoch < o.epochs && !m.stop; ++epoch) {
    Logs none;
    callbacks.each([&](Callback& c) { c.on_epoch_begin(epoch, none); });
    ps.sync_learning_rate(model.learning_rate());
    std::vector<ps::RemoteValue> values(static_cast<std::size_t>(o.steps_per_epoch));
    for (auto& v : values) check_status(coordinator.schedule(kStep, std::string(), &v));
    check_status(coordinator.join());
    std::vector<double> total(static_cast<std::size_t>(m.state_size), 0.0);
    for (auto& v : values) {
      std::string bytes;
      check_status(v.fetch(&bytes));
      const torch::Tensor st = decode_tensor(bytes);
      for (std::size_t i = 0; i < total.size() && i < static_cast<std::size_t>(st.numel()); ++i) {
        total[i] += st[static_cast<std::int64_t>(i)].item<double>();
      }
    }
    m.iterations += o.steps_per_epoch;
    ps.pull({});  // the chief's module has the current parameters for the callbacks
    epoch_logs = m.logs_of(total);
    callbacks.each([&](Callback& c) { c.on_epoch_end(epoch, epoch_logs); });
  }
  callbacks.each([&](Callback& c) { c.on_train_end(epoch_logs); });
  return *callbacks.history;
}

}  // namespace kolo::train
