// ParameterServerStrategy, ClusterCoordinator and RemoteValue (parameter_server.h) on
// src/ps: each task's role is served by an RpcServer (a ps task's PsService, a worker's
// WorkerService), the chief's and workers' PsClient reaches the shards, and the chief's
// ps::Coordinator schedules steps.
//
// Not for: fit's use of the strategy (ps_fit.cc), the wire and the shards (src/ps).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "common/logging.h"
#include "kolo/error.h"
#include "kolo/torch.h"
#include "kolo/train/parameter_server.h"
#include "ps/coordinator.h"
#include "ps/partition.h"
#include "ps/ps_service.h"
#include "ps/rpc.h"
#include "ps/task.h"
#include "startup/config.h"
#include "startup/tf_config.h"
#include "train/strategies/ps_impl.h"
#include "train/strategies/strategy_impl.h"

namespace kolo::train {
namespace {

void check(const Status& s) { check_status(s); }

std::string task_name(const std::string& type, int index) {
  return core::tf_task_name(type, index);
}

// "host:port" -> where to listen (loopback names bind loopback only; any other host binds
// every interface, which the job secret guards) and where others connect.
std::string bind_endpoint(const std::string& address) {
  const auto colon = address.rfind(':');
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  const bool loopback = host == "localhost" || host.rfind("127.", 0) == 0 || host == "[::1]";
  return "tcp://" + std::string(loopback ? "127.0.0.1" : "*") + ":" + port;
}
std::string connect_endpoint(const std::string& address) { return "tcp://" + address; }

ps::UpdateRule update_rule(const OptimizerSpec& spec) {
  ps::UpdateRule r;
  if (const auto* a = std::get_if<Adam>(&spec)) {
    r.kind = ps::UpdateRule::Kind::kAdam;
    r.learning_rate = a->learning_rate;
    r.beta_1 = a->beta_1;
    r.beta_2 = a->beta_2;
    r.epsilon = a->epsilon;
    r.amsgrad = a->amsgrad;
    r.weight_decay = a->weight_decay;
  } else if (const auto* s = std::get_if<SGD>(&spec)) {
    r.kind = ps::UpdateRule::Kind::kSgd;
    r.learning_rate = s->learning_rate;
    r.momentum = s->momentum;
    r.nesterov = s->nesterov;
    r.weight_decay = s->weight_decay;
  } else if (const auto* m = std::get_if<RMSprop>(&spec)) {
    r.kind = ps::UpdateRule::Kind::kRmsprop;
    r.learning_rate = m->learning_rate;
    r.rho = m->rho;
    r.momentum = m->momentum;
    r.epsilon = m->epsilon;
    r.centered = m->centered;
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "ParameterServerStrategy: the optimizer '" + optimizer_name(spec) +
                    "' is a CustomOptimizer, which cannot run on the ps tasks; use Adam, SGD "
                    "or RMSprop (their updates run where the variables live)");
  }
  return r;
}

// KOLO_* options through the registry (startup/options.def): parsed once, checked, with
// the registry's defaults and messages.
core::Config options_from_environment() {
  core::Config c;
  check_status(core::parse_config(core::process_env(), &c));
  return c;
}

}  // namespace

void check_status(const Status& s) {
  if (!s.ok()) throw_error(s.code(), s.message());
}

// ---------------------------------------------------------------- the strategy

ParameterServerStrategy::PsImpl::PsImpl(ClusterResolver r, VariablePartitioner p,
                                        ParameterServerOptions o)
    : resolver(std::move(r)), partitioner(p), options(o) {
  check(partitioner.validate());
  const ClusterSpec& c = resolver.cluster_spec();
  core::TfCluster tc;
  tc.chief = c.chief;
  tc.worker = c.worker;
  tc.ps = c.ps;
  tc.evaluator = c.evaluator;
  Status valid = core::validate_ps_cluster(tc);
  if (!valid.ok()) {
    throw Error(valid.code(), "ParameterServerStrategy: " + valid.message() +
                                  " (start with kolorun --ps N -np M PROGRAM, or give TF_CONFIG "
                                  "a \"worker\" and a \"ps\" job)");
  }
  if (c.chief.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "ParameterServerStrategy: the cluster has no chief; a parameter-server job's "
                "coordinator is its \"chief\" task (TensorFlow's rule)");
  }
  if (c.chief.size() > 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "ParameterServerStrategy: the cluster has " + std::to_string(c.chief.size()) +
                    " chiefs; a parameter-server job has one coordinator, the chief");
  }
  const int num_workers = static_cast<int>(c.worker.size());
  if (options.replicas_to_aggregate < 0 || options.replicas_to_aggregate > num_workers ||
      options.total_num_replicas < 0 || options.total_num_replicas > num_workers ||
      (options.total_num_replicas > 0 &&
       options.total_num_replicas < options.replicas_to_aggregate)) {
    throw Error(ErrorCode::kInvalidArgument,
                "ParameterServerStrategy: replicas_to_aggregate " +
                    std::to_string(options.replicas_to_aggregate) + " and total_num_replicas " +
                    std::to_string(options.total_num_replicas) + " with " +
                    std::to_string(num_workers) +
                    " workers: each must be at most the number of workers (a round's steps run on "
                    "different workers), and total_num_replicas (0: K) at least K");
  }
  const core::Config config = options_from_environment();
  if (options.timeout_seconds <= 0) options.timeout_seconds = config.peer_timeout_seconds;
  start_timeout_seconds = config.start_timeout_seconds;
  secret = config.rendezvous_secret;
  self = task_name(resolver.task_type(), resolver.task_id());
  if (resolver.task_type() != "ps") {
    ps::PsClientOptions co;
    for (std::size_t i = 0; i < c.ps.size(); ++i) {
      co.endpoints.push_back(connect_endpoint(c.ps[i]));
      co.names.push_back(task_name("ps", static_cast<int>(i)));
    }
    co.secret = secret;
    co.self = self;
    client = std::make_unique<ps::PsClient>(co);
  }
  if (is_chief()) heartbeat = std::make_unique<ps::ChiefHeartbeat>(other_tasks(), secret, self);
}

std::vector<ps::TaskAddress> ParameterServerStrategy::PsImpl::other_tasks() const {
  const ClusterSpec& c = resolver.cluster_spec();
  std::vector<ps::TaskAddress> tasks;
  for (std::size_t i = 0; i < c.worker.size(); ++i) {
    tasks.push_back({connect_endpoint(c.worker[i]), task_name("worker", static_cast<int>(i))});
  }
  for (std::size_t i = 0; i < c.ps.size(); ++i) {
    tasks.push_back({connect_endpoint(c.ps[i]), task_name("ps", static_cast<int>(i))});
  }
  return tasks;
}

ParameterServerStrategy::PsImpl::~PsImpl() {
  std::vector<bool> silent;
  if (heartbeat) {
    silent = heartbeat->went_silent();
    heartbeat.reset();
  }
  if (is_chief()) {
    coordinator.reset();
    ps::stop_tasks(other_tasks(), silent, secret, self,
                   deadline_after(std::min(3.0, options.timeout_seconds)));
  }
  if (ps_service) ps_service->shutdown();
  if (server) server->stop();
}

ps::Coordinator& ParameterServerStrategy::PsImpl::coordinator_for_chief() {
  if (!is_chief()) {
    throw Error(ErrorCode::kInvalidArgument,
                "ClusterCoordinator: this task is " + self +
                    "; only the chief coordinates (the other tasks call strategy.join())");
  }
  if (!coordinator) {
    ps::CoordinatorOptions o;
    const ClusterSpec& c = resolver.cluster_spec();
    for (std::size_t i = 0; i < c.worker.size(); ++i) {
      o.worker_endpoints.push_back(connect_endpoint(c.worker[i]));
      o.worker_names.push_back(task_name("worker", static_cast<int>(i)));
    }
    o.secret = secret;
    o.self = self;
    o.step_timeout_seconds = options.step_timeout_seconds;
    o.no_worker_timeout_seconds = options.timeout_seconds;
    o.ping_timeout_seconds = std::min(5.0, options.timeout_seconds);
    o.round_size = options.replicas_to_aggregate > 0
                       ? std::max(options.replicas_to_aggregate, options.total_num_replicas)
                       : 0;
    coordinator = std::make_unique<ps::Coordinator>(o);
  }
  return *coordinator;
}

void ParameterServerStrategy::PsImpl::sync_learning_rate(double lr) {
  if (learning_rate_sent < 0) learning_rate_sent = rule.learning_rate;
  if (lr == learning_rate_sent) return;
  check(client->set_learning_rate(lr, deadline()));
  learning_rate_sent = lr;
}

std::int64_t ParameterServerStrategy::PsImpl::sync_round() const {
  if (options.replicas_to_aggregate <= 0) return 0;
  return std::max<std::int64_t>(0, ps::current_step_round());
}

Deadline ParameterServerStrategy::PsImpl::deadline() const {
  return deadline_after(options.timeout_seconds);
}

void ParameterServerStrategy::PsImpl::bind(torch::nn::Module& module,
                                           const OptimizerSpec& optimizer, bool create) {
  std::lock_guard<std::mutex> lock(mu);
  rule = update_rule(optimizer);
  std::vector<ps::VariableSpec> specs;
  vars.clear();
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.device().is_cpu()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "ParameterServerStrategy: the parameter '" + item.key() + "' is on " +
                      p.device().str() + "; parameter-server training runs on the CPU for now");
    }
    if (p.scalar_type() != torch::kFloat && p.scalar_type() != torch::kDouble) {
      throw Error(ErrorCode::kInvalidArgument, "ParameterServerStrategy: the parameter '" +
                                                   item.key() + "' is " +
                                                   std::string(c10::toString(p.scalar_type())) +
                                                   "; ps tasks hold float32 and float64 variables");
    }
    specs.push_back({item.key(), p.sizes().vec(), to_kolo_dtype(p.scalar_type())});
    vars.push_back({item.key(), p, {}, false});
  }
  // Parameters of sparse Embedding modules.
  for (const auto& m : module.named_modules("", /*include_self=*/true)) {
    if (auto* e = m.value()->as<torch::nn::Embedding>()) {
      if (!e->options.sparse()) continue;
      const std::string name = m.key().empty() ? "weight" : m.key() + ".weight";
      for (Variable& v : vars) {
        if (v.name == name) v.sparse = true;
      }
    }
  }
  check(ps::place_variables(specs, partitioner, static_cast<int>(resolver.cluster_spec().ps.size()),
                            &shards));
  for (std::size_t s = 0; s < shards.size(); ++s) {
    for (Variable& v : vars) {
      if (v.name == shards[s].variable) v.shards.push_back(static_cast<int>(s));
    }
  }
  pulled.assign(shards.size(), 0);
  if (!create) return;
  for (const Variable& v : vars) {
    const torch::Tensor c = v.param.detach().contiguous();
    for (int s : v.shards) {
      const ps::ShardInfo& info = shards[s];
      const char* base = static_cast<const char*>(c.data_ptr()) + info.row_begin * info.row_bytes();
      bool existed = false;
      check(client->create(info, base, rule, options.replicas_to_aggregate, &existed, deadline()));
      if (existed) {
        KOLO_LOG(kInfo, "ps") << "the variable '" << info.variable << "' shard " << info.shard
                              << " exists on " << client->ps_name(info.ps_task)
                              << ": its values are kept";
      }
    }
  }
}

void ParameterServerStrategy::PsImpl::pull(const std::map<std::string, torch::Tensor>& rows) {
  std::lock_guard<std::mutex> lock(mu);
  if (vars.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "ParameterServerStrategy::pull: no variables; call create_variables first");
  }
  for (const auto& r : rows) {
    auto it = std::find_if(vars.begin(), vars.end(),
                           [&](const Variable& v) { return v.name == r.first; });
    if (it == vars.end() || !it->sparse) {
      throw Error(ErrorCode::kInvalidArgument,
                  "ParameterServerStrategy::pull: rows were given for '" + r.first +
                      "', which is not a sparse variable (torch::nn::Embedding with sparse(true))");
    }
  }
  std::vector<ps::Pull> pulls;
  struct Scatter {
    torch::Tensor dest_rows;  // global row indices
    std::string buffer;
    int pull;
  };
  std::vector<Scatter> scatters;
  pulls.reserve(shards.size());
  for (Variable& v : vars) {
    torch::Tensor data = v.param.detach();
    auto r = rows.find(v.name);
    torch::Tensor wanted;
    if (r != rows.end()) wanted = std::get<0>(torch::_unique(r->second.to(torch::kLong).flatten()));
    for (int s : v.shards) {
      const ps::ShardInfo& info = shards[s];
      ps::Pull p;
      p.shard = &info;
      p.min_version = sync_round();
      if (!wanted.defined()) {
        p.out = static_cast<char*>(data.data_ptr()) + info.row_begin * info.row_bytes();
        pulls.push_back(p);
        continue;
      }
      const std::int64_t end = info.row_begin + (info.shape.empty() ? 1 : info.shape[0]);
      torch::Tensor mine = wanted.masked_select((wanted >= info.row_begin) & (wanted < end));
      p.whole = false;
      p.rows.assign(mine.data_ptr<std::int64_t>(), mine.data_ptr<std::int64_t>() + mine.numel());
      for (auto& x : p.rows) x -= info.row_begin;
      scatters.push_back({mine, std::string(p.rows.size() * info.row_bytes(), '\0'),
                          static_cast<int>(pulls.size())});
      pulls.push_back(p);
    }
  }
  for (Scatter& sc : scatters) pulls[sc.pull].out = sc.buffer.data();
  check(client->pull(pulls, deadline()));
  for (std::size_t i = 0; i < pulls.size(); ++i) {
    const auto s = static_cast<std::size_t>(pulls[i].shard - shards.data());
    pulled[s] = pulls[i].version;
  }
  // Rows fetched into their places.
  std::size_t k = 0;
  for (Variable& v : vars) {
    for (int s : v.shards) {
      (void)s;
      if (k < scatters.size() && pulls[scatters[k].pull].shard == &shards[s]) {
        Scatter& sc = scatters[k++];
        if (sc.dest_rows.numel() == 0) continue;
        torch::Tensor data = v.param.detach();
        std::vector<std::int64_t> row_shape = data.sizes().vec();
        row_shape[0] = sc.dest_rows.numel();
        torch::Tensor got = torch::from_blob(sc.buffer.data(), row_shape, data.options());
        torch::NoGradGuard no_grad;
        data.index_copy_(0, sc.dest_rows, got);
      }
    }
  }
}

bool ParameterServerStrategy::PsImpl::push() {
  std::lock_guard<std::mutex> lock(mu);
  const bool sync = options.replicas_to_aggregate > 0;
  std::vector<ps::Push> pushes;
  std::vector<torch::Tensor> keep;  // owns the bytes pushed
  for (Variable& v : vars) {
    torch::Tensor g = v.param.grad();
    if (!g.defined() && !sync) continue;
    torch::Tensor dense, indices, values;
    if (g.defined() && g.is_sparse()) {
      torch::Tensor c = g.coalesce();
      indices = c.indices()[0].contiguous();
      values = c.values().contiguous();
    } else if (g.defined()) {
      dense = g.contiguous();
    } else if (v.sparse) {
      indices = torch::empty({0}, torch::kLong);
      values = torch::empty({0}, v.param.options());
    } else {
      dense = torch::zeros_like(v.param);
    }
    for (int s : v.shards) {
      const ps::ShardInfo& info = shards[s];
      ps::Push p;
      p.shard = &info;
      p.version = options.replicas_to_aggregate > 0 && sync_round() >= 0 ? sync_round() : pulled[s];
      if (dense.defined()) {
        p.grad = static_cast<const char*>(dense.data_ptr()) + info.row_begin * info.row_bytes();
        keep.push_back(dense);
      } else {
        const std::int64_t end = info.row_begin + (info.shape.empty() ? 1 : info.shape[0]);
        torch::Tensor mask = (indices >= info.row_begin) & (indices < end);
        torch::Tensor local = indices.masked_select(mask) - info.row_begin;
        torch::Tensor vals = values.index({mask}).contiguous();
        p.whole = false;
        p.rows.assign(local.data_ptr<std::int64_t>(),
                      local.data_ptr<std::int64_t>() + local.numel());
        p.grad = vals.data_ptr();
        keep.push_back(vals);
      }
      pushes.push_back(p);
    }
  }
  check(client->push(pushes, deadline()));
  bool all = true;
  for (const ps::Push& p : pushes) all = all && p.accepted;
  for (Variable& v : vars) {
    if (v.param.grad().defined()) v.param.mutable_grad() = torch::Tensor();
  }
  return all;
}

void ParameterServerStrategy::PsImpl::serve() {
  const ClusterSpec& c = resolver.cluster_spec();
  const std::string& type = resolver.task_type();
  if (type != "ps" && type != "worker") return;
  const std::string& address = (type == "ps" ? c.ps : c.worker)[resolver.task_id()];
  ps::RpcServerOptions so;
  so.endpoint = bind_endpoint(address);
  so.secret = secret;
  so.name = self;
  server = std::make_unique<ps::RpcServer>(so);
  std::function<bool(Deadline)> stopped;
  if (type == "ps") {
    ps_service = std::make_unique<ps::PsService>(*server);
    auto stop = std::make_shared<ps::StopSignal>(*server);
    stopped = [stop](Deadline d) { return stop->wait_until(d); };
  } else {
    worker_service = std::make_unique<ps::WorkerService>(*server);
    std::lock_guard<std::mutex> lock(mu);
    for (auto& step : steps) {
      Step fn = step.second;
      auto run_mu = step_mu;
      worker_service->register_step(step.first,
                                    [fn, run_mu](const std::string& args, std::string* out) {
                                      std::lock_guard<std::mutex> one_at_a_time(*run_mu);
                                      try {
                                        *out = encode_tensor(fn(decode_tensor(args)));
                                        return Status::OK();
                                      } catch (const Error& e) {
                                        return Status(e.code(), e.what());
                                      }
                                    });
    }
    stopped = [this](Deadline d) { return worker_service->wait_until_stopped(d).ok(); };
  }
  // The chief's heartbeat (ps::ChiefHeartbeat): a task whose chief is gone without telling
  // it to stop (it died, with no launcher to stop this task) stops serving in the bound
  // instead of waiting forever.
  ps::ServeOptions o;
  o.self = self;
  o.chief = task_name("chief", 0);
  o.start_timeout_seconds = start_timeout_seconds;
  o.peer_timeout_seconds = options.timeout_seconds;
  const Status s = ps::serve_until_stopped(*server, o, stopped);
  if (ps_service) ps_service->shutdown();
  server->stop();
  check(s);
}

ParameterServerStrategy::ParameterServerStrategy(ClusterResolver resolver,
                                                 VariablePartitioner partitioner,
                                                 ParameterServerOptions options)
    : Strategy(std::make_shared<Strategy::Impl>()) {
  impl_->name = "parameter_server";
  impl_->devices = {torch::Device(torch::kCPU)};
  impl_->workers = 1;  // replicas in one step (TF: num_replicas_in_sync is per worker)
  impl_->worker = 0;
  impl_->ps = std::make_shared<PsImpl>(std::move(resolver), partitioner, options);
  impl_->extended = parameter_server_extended();
  impl_->pool = std::make_unique<ReplicaPool>(1, 0);
}

ParameterServerStrategy::PsImpl& ParameterServerStrategy::ps_impl() const { return *impl_->ps; }

const std::string& ParameterServerStrategy::task_type() const {
  return impl_->ps->resolver.task_type();
}
int ParameterServerStrategy::task_index() const { return impl_->ps->resolver.task_id(); }
int ParameterServerStrategy::num_ps() const {
  return static_cast<int>(impl_->ps->resolver.cluster_spec().ps.size());
}
int ParameterServerStrategy::num_worker_tasks() const {
  return static_cast<int>(impl_->ps->resolver.cluster_spec().worker.size());
}
const ParameterServerOptions& ParameterServerStrategy::ps_options() const {
  return impl_->ps->options;
}

void ParameterServerStrategy::create_variables(torch::nn::Module& module,
                                               const OptimizerSpec& optimizer) const {
  ParameterServerStrategy::PsImpl& p = *impl_->ps;
  if (p.resolver.task_type() == "ps") return;  // a ps task holds what the chief creates
  p.bind(module, optimizer, /*create=*/p.resolver.task_type() == "chief");
}

void ParameterServerStrategy::pull(torch::nn::Module& module,
                                   const std::map<std::string, torch::Tensor>& rows) const {
  (void)module;  // the parameters bound by create_variables are this module's
  impl_->ps->pull(rows);
}

bool ParameterServerStrategy::push(torch::nn::Module& module) const {
  (void)module;
  return impl_->ps->push();
}

void ParameterServerStrategy::set_learning_rate(double learning_rate) const {
  ParameterServerStrategy::PsImpl& p = *impl_->ps;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.rule.learning_rate = learning_rate;
  }
  check(p.client->set_learning_rate(learning_rate, p.deadline()));
}

void ParameterServerStrategy::register_step(const std::string& name, Step step) const {
  std::lock_guard<std::mutex> lock(impl_->ps->mu);
  impl_->ps->steps[name] = std::move(step);
}

void ParameterServerStrategy::join() const { impl_->ps->serve(); }

std::uint64_t ParameterServerStrategy::push_bytes_sent() const {
  return impl_->ps->client ? impl_->ps->client->push_bytes_sent() : 0;
}

}  // namespace kolo::train
