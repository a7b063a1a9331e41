// fit, evaluate and predict (model.h): Keras's loops over a strategy's replicas. One path
// for every strategy: what differs between them is the strategy's extended part
// (strategies/extended.h), which fit asks and never branches on.
//
// One training step, with L local replicas and W workers:
//   1. every replica (its own thread) takes its slice of the global batch, runs forward,
//      the loss (per-example losses summed, / its batch size, / the strategy's
//      loss_divisor: num_replicas_in_sync, or 1 for Horovod, whose optimizer averages) and
//      backward, and adds its batch to its metric state;
//   2. the strategy reduces the gradients into replica 0's: the replicas' sum (each thread
//      sums a share of the parameters), then over the workers by kolo's runtime (with
//      L == 1 through kolo::DistributedOptimizer, whose hooks start each allreduce during
//      backward; else one allreduce per gradient, fused by the runtime);
//   3. the optimizer steps replica 0, whose parameters are copied to the others;
//   4. the strategy sums the metric states over the workers (one small allreduce started
//      before backward), so every worker logs the same exact values.
//
// The epoch loop (FitLoop::run, fit_loop.h) goes on from a position (epoch, batch, the
// epoch's metric sums) and has the commit points that elastic fit (elastic_fit.cc) uses.
//
// Not for: replicas and the TrainingHost side (model.cc), batching (data.cc), the elastic
// state (elastic_fit.cc).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "common/logging.h"
#include "kolo/error.h"
#include "kolo/kolo.h"
#include "kolo/train/callbacks.h"
#include "kolo/train/progbar.h"
#include "train/keras/fit_loop.h"
#include "train/keras/model_impl.h"
#include "train/strategies/strategy_impl.h"

namespace kolo::train {

namespace {

void require_compiled(const Model::Impl& m, const char* what) {
  if (!m.compiled) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("Model::") + what +
                    ": the model is not compiled; call compile(optimizer, loss, metrics) first");
  }
}

void require_labels(const Dataset& d, const char* what) {
  if (!d.file_based() && !d.y().defined()) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("Model::") + what + ": the data has no labels (y)");
  }
}

// Keras's input check: a model whose first layer is a Linear (Dense) takes examples of
// in_features values; data whose examples have another shape (and that the model's forward
// cannot take, tried on one example) is refused before any step,
// naming the layer and both shapes (libtorch's own "mat1 and mat2 shapes cannot be
// multiplied" named neither, and came as an uncaught c10::Error).
void check_input_shape(Model::Impl& m, const Dataset& d, const char* what) {
  if (d.file_based() || !d.x().defined() || m.replicas.empty()) return;
  // Only a Sequential whose first module is the Linear: there the data meets it as given
  // (another module's forward may reshape before its first Linear).
  if (dynamic_cast<const torch::nn::SequentialImpl*>(m.replicas[0].get()) == nullptr) return;
  const auto children = m.replicas[0]->named_children();
  if (children.is_empty()) return;
  const std::string name = children[0].key();
  const auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(children[0].value().get());
  if (linear == nullptr) return;
  const std::int64_t in = linear->options.in_features();
  const torch::Tensor& x = d.x();
  if (x.dim() == 2 && x.size(1) == in) return;
  // The model's forward may adapt the data first (a Model with its own forward): one
  // example through it decides.
  {
    torch::NoGradGuard no_grad;
    const bool training = m.replicas[0]->is_training();
    m.replicas[0]->eval();
    try {
      m.forward(*m.replicas[0], x.slice(0, 0, 1).to(m.strategy.devices()[0]));
      m.replicas[0]->train(training);
      return;
    } catch (const c10::Error&) {
      m.replicas[0]->train(training);
    }
  }
  std::string found = "(None";
  for (std::int64_t i = 1; i < x.dim(); ++i) found += ", " + std::to_string(x.size(i));
  found += x.dim() == 1 ? ",)" : ")";
  throw Error(ErrorCode::kInvalidArgument,
              std::string("Model::") + what + ": input 0 of layer '" + name +
                  "' (Linear, in_features=" + std::to_string(in) +
                  ") is incompatible with the data: expected shape=(None, " + std::to_string(in) +
                  "), found shape=" + found +
                  "; reshape x (e.g. x.reshape({x.size(0), -1}) for images) or change the "
                  "first layer's input size");
}

// The examples of a step for replica r, on its device.
torch::Tensor rows(const torch::Tensor& t, const torch::Tensor& idx, const torch::Device& d) {
  return t.index_select(0, idx).to(d);
}

}  // namespace

CallbackList make_callbacks(const std::vector<CallbackPtr>& user, int verbose,
                            const StrategyExtended* strategy, bool history) {
  CallbackList list;
  if (strategy != nullptr) list.all = strategy->leading_callbacks();
  bool have_bar = false;
  for (const auto& c : user) have_bar |= dynamic_cast<ProgbarLogger*>(c.get()) != nullptr;
  if (verbose != 0 && !have_bar) list.all.push_back(std::make_shared<ProgbarLogger>());
  std::set<std::string> warned;
  for (const auto& c : user) {
    if (!c) throw Error(ErrorCode::kInvalidArgument, "a callback is null");
    if (const char* why = strategy != nullptr ? strategy->redundant_callback(*c) : nullptr) {
      if (warned.insert(why).second) {
        KOLO_LOG(kWarning, "train") << why;
      }
      continue;
    }
    if (auto h = std::dynamic_pointer_cast<History>(c)) list.history = h;
    list.all.push_back(c);
  }
  if (history && !list.history) {
    list.history = std::make_shared<History>();
    list.all.push_back(list.history);
  }
  return list;
}

// --- one step ---------------------------------------------------------------------------

namespace detail {

// Runs one training step over `pieces` (one index tensor per local replica) and returns
// this step's metric state summed over every replica of every worker.
std::vector<double> train_step(Model::Impl& m, const Dataset& data,
                               const std::vector<torch::Tensor>& pieces) {
  const StrategyExtended& strategy = *m.strategy_impl->extended;
  const int L = m.local();
  const double divisor = strategy.loss_divisor(m);
  std::vector<std::vector<double>> states(
      static_cast<std::size_t>(L),
      std::vector<double>(static_cast<std::size_t>(m.state_size), 0.0));
  m.optimizer->zero_grad();
  std::vector<torch::Tensor> losses(static_cast<std::size_t>(L));
  m.strategy.for_each_replica([&](int r) {
    auto& module = *m.replicas[static_cast<std::size_t>(r)];
    const torch::Device dev = m.strategy.devices()[static_cast<std::size_t>(r)];
    if (r > 0) {
      for (auto& p : m.params[static_cast<std::size_t>(r)]) p.mutable_grad() = torch::Tensor();
    }
    const torch::Tensor& idx = pieces[static_cast<std::size_t>(r)];
    const std::int64_t b = idx.numel();
    torch::Tensor x = rows(data.x(), idx, dev), y = rows(data.y(), idx, dev);
    torch::Tensor out = m.forward(module, x);
    torch::Tensor per = m.loss->per_example(out, y);
    const torch::Tensor total = per.sum();
    losses[static_cast<std::size_t>(r)] =
        total * (1.0 / static_cast<double>(std::max<std::int64_t>(b, 1)) / divisor);
    auto& st = states[static_cast<std::size_t>(r)];
    st[0] = total.item<double>();
    st[1] = static_cast<double>(b);
    const torch::Tensor pred = out.detach();
    for (std::size_t i = 0; i < m.metrics.size(); ++i) {
      m.metrics[i]->accumulate(pred, y, &st[static_cast<std::size_t>(m.metric_offsets[i])]);
    }
  });
  std::vector<double> state(static_cast<std::size_t>(m.state_size), 0.0);
  for (const auto& st : states) {
    for (std::size_t i = 0; i < state.size(); ++i) state[i] += st[i];
  }
  // The metrics' sum goes out before backward: it is negotiated and run while the
  // replicas compute their gradients, instead of costing a cycle of its own after them.
  std::optional<TorchHandle> metrics_handle = strategy.start_metric_sum(m, state);
  m.strategy.for_each_replica([&](int r) { losses[static_cast<std::size_t>(r)].backward(); });
  strategy.reduce_gradients(m);
  strategy.apply_gradients(m);
  ++m.iterations;
  m.copy_to_replicas();
  if (metrics_handle) {
    torch::Tensor t = metrics_handle->wait();
    state.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  return state;
}

// Forward only (evaluate): the step's metric state summed over replicas and workers.
std::vector<double> test_step(Model::Impl& m, const Dataset& data,
                              const std::vector<torch::Tensor>& pieces) {
  std::vector<std::vector<double>> states(
      static_cast<std::size_t>(m.local()),
      std::vector<double>(static_cast<std::size_t>(m.state_size), 0.0));
  m.strategy.for_each_replica([&](int r) {
    torch::NoGradGuard no_grad;  // per thread
    const torch::Device dev = m.strategy.devices()[static_cast<std::size_t>(r)];
    const torch::Tensor& idx = pieces[static_cast<std::size_t>(r)];
    torch::Tensor x = rows(data.x(), idx, dev), y = rows(data.y(), idx, dev);
    torch::Tensor out = m.forward(*m.replicas[static_cast<std::size_t>(r)], x);
    torch::Tensor per = m.loss->per_example(out, y);
    auto& st = states[static_cast<std::size_t>(r)];
    st[0] = per.sum().item<double>();
    st[1] = static_cast<double>(idx.numel());
    for (std::size_t i = 0; i < m.metrics.size(); ++i) {
      m.metrics[i]->accumulate(out, y, &st[static_cast<std::size_t>(m.metric_offsets[i])]);
    }
  });
  std::vector<double> state(static_cast<std::size_t>(m.state_size), 0.0);
  for (const auto& st : states) {
    for (std::size_t i = 0; i < state.size(); ++i) state[i] += st[i];
  }
  // The Horovod strategy also evaluates exactly: evaluate() is not averaged by a callback.
  return m.sum_over_workers(state);
}

}  // namespace detail

// --- plans -------------------------------------------------------------------------------

namespace {

using Input = WorkerInput;

Input prepare(Model::Impl& m, const Dataset& data, std::int64_t batch, std::int64_t max_steps) {
  return load_worker_input(m.strategy, data, batch, max_steps, "train.fit.steps");
}

EpochPlan plan(const Model::Impl& m, const Input& in, std::int64_t batch, bool shuffle,
               std::uint64_t seed, std::int64_t epoch, std::int64_t max_steps) {
  PlanOptions o;
  o.examples = in.local.size();
  o.global_batch = batch;
  o.workers = m.strategy.num_workers();
  o.worker = m.strategy.worker_index();
  o.local_replicas = m.local();
  o.policy = in.policy;
  o.shuffle = shuffle;
  o.seed = seed;
  o.epoch = epoch;
  o.max_steps = max_steps;
  o.force_steps = in.force_steps;
  return plan_epoch(o);
}

void set_training(Model::Impl& m, bool training) {
  for (auto& r : m.replicas) r->train(training);
}

Logs run_evaluate(Model::Impl& m, const Dataset& data, std::int64_t batch, std::int64_t steps,
                  CallbackList& callbacks, const std::string& prefix) {
  Input in = prepare(m, data, batch, steps);
  m.resolve_metrics(in.local.x(), in.local.y());
  const EpochPlan p = plan(m, in, batch, false, 0, 0, steps);
  std::vector<double> total(static_cast<std::size_t>(m.state_size), 0.0);
  Logs begin;
  callbacks.each([&](Callback& c) { c.on_test_begin(begin); });
  set_training(m, false);
  for (std::int64_t s = 0; s < p.steps; ++s) {
    Logs none;
    callbacks.each([&](Callback& c) { c.on_test_batch_begin(static_cast<int>(s), none); });
    const auto st = detail::test_step(m, in.local, p.pieces[static_cast<std::size_t>(s)]);
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += st[i];
    Logs logs = m.logs_of(total);
    callbacks.each([&](Callback& c) { c.on_test_batch_end(static_cast<int>(s), logs); });
  }
  set_training(m, true);
  Logs logs = m.logs_of(total);
  callbacks.each([&](Callback& c) { c.on_test_end(logs); });
  if (prefix.empty()) return logs;
  Logs out;
  for (const auto& [k, v] : logs) out.set(prefix + k, v);
  return out;
}

bool validate_at(const FitOptions& o, int epoch) {
  if (!o.validation_epochs.empty()) {
    return std::find(o.validation_epochs.begin(), o.validation_epochs.end(), epoch + 1) !=
           o.validation_epochs.end();
  }
  return o.validation_freq > 0 && (epoch + 1) % o.validation_freq == 0;
}

}  // namespace

// --- fit -------------------------------------------------------------------------------------

History Model::fit(const torch::Tensor& x, const torch::Tensor& y, FitOptions options) {
  return fit(Dataset::from_tensors(x, y), std::move(options));
}

namespace {

// What elastic fit needs that plain fit does not check (fit_elastic's preconditions), and
// plain fit's refusal inside an elastic job.
void check_elastic(const Strategy::Impl& s, const Dataset& data, const FitOptions& o) {
  if (!o.elastic.enabled) {
    if (elastic_job(s)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Model::fit: this process is a worker of an elastic job (kolorun "
                  "--min-np/--max-np), where workers come and go and a new one joins while the "
                  "others train: pass FitOptions{.elastic = {.enabled = true}} (fit then "
                  "commits its state and carries on across the changes), or launch with "
                  "kolorun -np N for a fixed set of workers");
    }
    return;
  }
  if (!s.runtime) {
    throw Error(ErrorCode::kInvalidArgument,
                "Model::fit: FitOptions::elastic needs a strategy over kolo's runtime "
                "(HorovodStrategy or MultiWorkerMirroredStrategy); the '" +
                    s.name + "' strategy trains in this process alone");
  }
  if (o.elastic.commit_every < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "Model::fit: FitOptions::elastic.commit_every must be >= 1 (batches between "
                "commits), not " +
                    std::to_string(o.elastic.commit_every));
  }
  const AutoShardPolicy policy = data.auto_shard_policy();
  if (data.file_based() || policy == AutoShardPolicy::kOff || policy == AutoShardPolicy::kFile) {
    throw Error(ErrorCode::kInvalidArgument,
                "Model::fit: an elastic fit splits each global batch over the workers there "
                "are, so every worker must hold all the training data: pass tensors (or a "
                "Dataset of them) with AutoShardPolicy kAuto or kData, not a dataset of files "
                "or kOff/kFile");
  }
  for (const auto& c : o.callbacks) {
    const char* refused = dynamic_cast<BackupAndRestore*>(c.get()) ? "BackupAndRestore"
                          : dynamic_cast<BroadcastGlobalVariables*>(c.get())
                              ? "BroadcastGlobalVariables"
                              : nullptr;
    if (refused) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("Model::fit: ") + refused +
                      " cannot run in an elastic fit: a worker that joins later would run its "
                      "collectives alone; the elastic state does its work (commits in memory, "
                      "and the chief's state synced to every worker); remove the callback");
    }
  }
}

}  // namespace

void FitLoop::run(FitPosition& at) {
  const auto zeros = [&] {
    return std::vector<double>(static_cast<std::size_t>(m.state_size), 0.0);
  };
  if (at.totals.size() != static_cast<std::size_t>(m.state_size)) at.totals = zeros();
  while (at.epoch < o.epochs && !m.stop) {
    const int epoch = at.epoch;
    if (begun != epoch) {
      Logs none;
      callbacks.each([&](Callback& c) { c.on_epoch_begin(epoch, none); });
      begun = epoch;
    }
    set_training(m, true);
    // The plan of the workers there are now: its batch s holds the same examples for any
    // number of workers (only their split over the replicas differs), so an epoch goes on
    // at batch at.step after a change of workers without repeating or skipping any.
    const EpochPlan p = plan(m, in, o.batch_size, o.shuffle, o.seed, epoch, o.steps_per_epoch);
    while (at.step < p.steps) {
      const std::int64_t s = at.step;
      Logs batch_begin;
      callbacks.each(
          [&](Callback& c) { c.on_train_batch_begin(static_cast<int>(s), batch_begin); });
      const auto st = detail::train_step(m, in.local, p.pieces[static_cast<std::size_t>(s)]);
      for (std::size_t i = 0; i < at.totals.size(); ++i) at.totals[i] += st[i];
      at.step = s + 1;
      Logs logs = m.logs_of(at.totals);
      callbacks.each([&](Callback& c) { c.on_train_batch_end(static_cast<int>(s), logs); });
      if (m.stop) break;
      if (commit && at.step < p.steps && at.step % o.elastic.commit_every == 0) {
        commit(CommitPoint::kBatches);
      }
    }
    if (commit) commit(CommitPoint::kEpochBatches);
    epoch_logs = m.logs_of(at.totals);
    if (validation && validate_at(o, epoch)) {
      // The same callbacks see the test hooks (Keras).
      Logs val =
          run_evaluate(m, *validation, validation_batch, o.validation_steps, callbacks, "val_");
      for (const auto& [k, v] : val) epoch_logs.set(k, v);
    }
    callbacks.each([&](Callback& c) { c.on_epoch_end(epoch, epoch_logs); });
    at = FitPosition{epoch + 1, 0, zeros()};
    if (commit) commit(CommitPoint::kEpochEnd);
  }
}

History Model::fit(const Dataset& data_in, FitOptions o) {
  Impl& m = *impl_;
  require_compiled(m, "fit");
  require_labels(data_in, "fit");
  check_input_shape(m, data_in, "fit");
  const StrategyExtended& strategy = *m.strategy_impl->extended;
  if (auto own = strategy.fit(*this, m, data_in, o)) return std::move(*own);
  check_elastic(*m.strategy_impl, data_in, o);
  if (o.epochs < 0 || o.initial_epoch < 0) {
    throw Error(ErrorCode::kInvalidArgument, "fit: epochs and initial_epoch must be >= 0");
  }
  if (o.validation_split < 0 || o.validation_split >= 1) {
    throw Error(ErrorCode::kInvalidArgument, "fit: validation_split must be in [0, 1), not " +
                                                 std::to_string(o.validation_split));
  }
  Dataset train = data_in;
  std::optional<Dataset> validation = o.validation_data;
  if (!validation && o.validation_split > 0) {
    if (data_in.file_based()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "fit: validation_split needs tensors, not a dataset of files; pass "
                  "validation_data");
    }
    // Keras: the last fraction, before shuffling.
    const std::int64_t n = data_in.size();
    const auto split_at =
        static_cast<std::int64_t>(std::floor(static_cast<double>(n) * (1.0 - o.validation_split)));
    validation = data_in.slice(split_at, n);
    train = data_in.slice(0, split_at);
  }
  if (validation) require_labels(*validation, "fit (validation_data)");

  FitLoop loop(m, o, prepare(m, train, o.batch_size, o.steps_per_epoch));
  loop.validation = std::move(validation);
  loop.validation_batch = o.validation_batch_size > 0 ? o.validation_batch_size : o.batch_size;
  m.resolve_metrics(loop.in.local.x(), loop.in.local.y());
  const std::int64_t steps = plan(m, loop.in, o.batch_size, false, 0, 0, o.steps_per_epoch).steps;

  loop.callbacks = make_callbacks(o.callbacks, o.verbose, &strategy, true);
  TrainParams params;
  params.epochs = o.epochs;
  params.initial_epoch = o.initial_epoch;
  params.steps = steps;
  params.verbose = o.verbose;
  params.metrics = metrics_names();
  if (loop.validation) {
    for (const auto& n : metrics_names()) params.metrics.push_back("val_" + n);
  }
  loop.callbacks.init(this, params);

  m.stop = false;
  m.resume_epoch = -1;
  Logs begin;
  loop.callbacks.each([&](Callback& c) { c.on_train_begin(begin); });
  FitPosition at;
  at.epoch = m.resume_epoch >= 0 ? m.resume_epoch : o.initial_epoch;
  if (o.elastic.enabled) {
    if (!fit_elastic(loop, at)) {
      KOLO_LOG(kInfo, "train") << "fit: kolorun removed this worker from the elastic job at epoch "
                               << at.epoch + 1 << "; kolo is shut down";
    }
  } else {
    loop.run(at);
  }
  loop.callbacks.each([&](Callback& c) { c.on_train_end(loop.epoch_logs); });
  return *loop.callbacks.history;
}

// --- evaluate and predict --------------------------------------------------------------------

Logs Model::evaluate(const torch::Tensor& x, const torch::Tensor& y, EvaluateOptions options) {
  return evaluate(Dataset::from_tensors(x, y), std::move(options));
}

Logs Model::evaluate(const Dataset& data, EvaluateOptions o) {
  Impl& m = *impl_;
  require_compiled(m, "evaluate");
  require_labels(data, "evaluate");
  check_input_shape(m, data, "evaluate");
  CallbackList callbacks = make_callbacks(o.callbacks, o.verbose, nullptr, false);
  TrainParams params;
  params.verbose = o.verbose;
  params.metrics = metrics_names();
  callbacks.init(this, params);
  return run_evaluate(m, data, o.batch_size, o.steps, callbacks, "");
}

torch::Tensor Model::predict(const torch::Tensor& x, PredictOptions options) {
  return predict(Dataset::from_tensors(x), std::move(options));
}

torch::Tensor Model::predict(const Dataset& data, PredictOptions o) {
  Impl& m = *impl_;
  check_input_shape(m, data, "predict");
  // Every worker predicts its replicas' slices of each batch; the slices are gathered in
  // order, so that every worker returns the outputs of every example.
  Dataset all = data.with_auto_shard_policy(AutoShardPolicy::kData);
  Input in = prepare(m, all, o.batch_size, o.steps);
  const EpochPlan p = plan(m, in, o.batch_size, false, 0, 0, o.steps);
  CallbackList callbacks = make_callbacks(o.callbacks, o.verbose, nullptr, false);
  TrainParams params;
  params.verbose = o.verbose;
  params.steps = p.steps;
  callbacks.init(this, params);
  Logs begin;
  callbacks.each([&](Callback& c) { c.on_predict_begin(begin); });
  set_training(m, false);
  std::vector<torch::Tensor> outputs;
  for (std::int64_t s = 0; s < p.steps; ++s) {
    Logs none;
    callbacks.each([&](Callback& c) { c.on_predict_batch_begin(static_cast<int>(s), none); });
    std::vector<torch::Tensor> mine(static_cast<std::size_t>(m.local()));
    m.strategy.for_each_replica([&](int r) {
      torch::NoGradGuard no_grad;
      const torch::Device dev = m.strategy.devices()[static_cast<std::size_t>(r)];
      const torch::Tensor x = rows(
          in.local.x(), p.pieces[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)], dev);
      mine[static_cast<std::size_t>(r)] =
          m.forward(*m.replicas[static_cast<std::size_t>(r)], x).to(torch::kCPU);
    });
    torch::Tensor step = torch::cat(mine);
    if (m.workers() > 1) step = kolo::allgather(step.contiguous(), {.name = "train.predict"});
    outputs.push_back(step);
    Logs logs;
    callbacks.each([&](Callback& c) { c.on_predict_batch_end(static_cast<int>(s), logs); });
  }
  set_training(m, true);
  Logs end;
  callbacks.each([&](Callback& c) { c.on_predict_end(end); });
  return outputs.empty() ? torch::Tensor() : torch::cat(outputs);
}

}  // namespace kolo::train
