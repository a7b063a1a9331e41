// Strategies (strategy.h): which replicas a process runs and on which devices, the
// threads that run them, and the reductions over replicas and workers.
//
// Threads: the local replica 0 runs on the calling thread, replicas 1..n-1 each on a
// thread of their own that lives as long as the strategy (its Impl), so that every step
// does not start threads. Not for: training steps (model.cc).
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "kolo/error.h"
#include "kolo/kolo.h"
#include "kolo/torch.h"
#include "train/strategies/ps_impl.h"
#include "train/strategies/strategy_impl.h"

namespace kolo::train {

// --- ReplicaPool -------------------------------------------------------------------------

ReplicaPool::ReplicaPool(int replicas, int intra_op_threads) : size_(replicas) {
  for (int r = 1; r < replicas; ++r) {
    threads_.emplace_back([this, r, intra_op_threads] { serve(r, intra_op_threads); });
  }
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::serve(int replica, int intra_op_threads) {
  // OpenMP's thread count is per thread: set it here, once, for this replica's ops.
  if (intra_op_threads > 0) at::set_num_threads(intra_op_threads);
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      fn = fn_;
    }
    std::exception_ptr error;
    try {
      (*fn)(replica);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error && !error_) error_ = error;
      if (--pending_ == 0) done_.notify_all();
    }
  }
}

void ReplicaPool::run(const std::function<void(int)>& fn) {
  if (size_ == 1) {
    fn(0);
    return;
  }
  std::lock_guard<std::mutex> one_at_a_time(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    pending_ = size_ - 1;
    error_ = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  std::exception_ptr theirs;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    theirs = error_;
    fn_ = nullptr;
  }
  if (mine) std::rethrow_exception(mine);
  if (theirs) std::rethrow_exception(theirs);
}

// --- devices -----------------------------------------------------------------------------

torch::Device parse_device(const std::string& name) {
  std::string s;
  for (char c : name) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s.rfind("/device:", 0) == 0) s = s.substr(8);
  if (!s.empty() && s[0] == '/') s = s.substr(1);
  std::string kind = s, index;
  if (auto colon = s.find(':'); colon != std::string::npos) {
    kind = s.substr(0, colon);
    index = s.substr(colon + 1);
  }
  const bool digits = !index.empty() && std::all_of(index.begin(), index.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  if ((!index.empty() && !digits) || (kind != "cpu" && kind != "gpu" && kind != "cuda")) {
    throw Error(ErrorCode::kInvalidArgument,
                "unknown device '" + name +
                    "': use cpu, cpu:N (CPU replicas), gpu:N or cuda:N (TensorFlow's "
                    "/device:GPU:N also works)");
  }
  if (kind == "cpu") return torch::Device(torch::kCPU);
  const int i = index.empty() ? 0 : std::stoi(index);
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (i >= gpus) {
    throw Error(ErrorCode::kInvalidArgument,
                "device '" + name + "' does not exist: this process sees " + std::to_string(gpus) +
                    (gpus == 1 ? " GPU" : " GPUs"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
}

namespace {

std::vector<torch::Device> default_devices() {
  std::vector<torch::Device> out;
  const int gpus = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < gpus; ++i) out.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
  if (out.empty()) out.emplace_back(torch::kCPU);
  return out;
}

std::vector<torch::Device> parse_devices(const std::vector<std::string>& names) {
  if (names.empty()) return default_devices();
  std::vector<torch::Device> out;
  for (const auto& n : names) out.push_back(parse_device(n));
  return out;
}

std::shared_ptr<Strategy::Impl> make_impl(std::string name, std::vector<torch::Device> devices,
                                          int workers, int worker) {
  auto impl = std::make_shared<Strategy::Impl>();
  impl->name = std::move(name);
  impl->devices = std::move(devices);
  impl->workers = workers;
  impl->worker = worker;
  const int replicas = static_cast<int>(impl->devices.size());
  int threads = 0;
  if (replicas > 1) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    threads = std::max<int>(1, static_cast<int>(cores > 0 ? cores : 1) / replicas);
    at::set_num_threads(threads);  // replica 0 runs on this thread
  }
  impl->pool = std::make_unique<ReplicaPool>(replicas, threads);
  return impl;
}

}  // namespace

// --- Strategy ----------------------------------------------------------------------------

Strategy::Strategy() : impl_(make_impl("default", {torch::Device(torch::kCPU)}, 1, 0)) {}
Strategy::Strategy(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Strategy::~Strategy() = default;

const std::string& Strategy::name() const { return impl_->name; }
const std::vector<torch::Device>& Strategy::devices() const { return impl_->devices; }
int Strategy::num_local_replicas() const { return static_cast<int>(impl_->devices.size()); }
int Strategy::num_workers() const {
  return impl_->runtime && kolo::is_initialized() ? kolo::size() : impl_->workers;
}
int Strategy::worker_index() const {
  return impl_->runtime && kolo::is_initialized() ? kolo::rank() : impl_->worker;
}
int Strategy::num_replicas_in_sync() const { return num_local_replicas() * num_workers(); }
bool Strategy::is_chief() const {
  // A parameter-server job's chief is its coordinator task (TensorFlow's "chief" job).
  if (impl_->ps) return impl_->ps->is_chief();
  return worker_index() == 0;
}
const CommunicationOptions& Strategy::communication_options() const { return impl_->options; }
bool Strategy::horovod() const { return impl_->horovod; }

void Strategy::for_each_replica(const std::function<void(int)>& fn) const { impl_->pool->run(fn); }

PerReplica Strategy::run(const std::function<torch::Tensor(const ReplicaContext&)>& fn) const {
  PerReplica out(static_cast<std::size_t>(num_local_replicas()));
  for_each_replica([&](int r) {
    ReplicaContext c;
    c.local_replica_id = r;
    c.replica_id_in_sync_group = worker_index() * num_local_replicas() + r;
    c.num_replicas_in_sync = num_replicas_in_sync();
    c.device = devices()[static_cast<std::size_t>(r)];
    out[static_cast<std::size_t>(r)] = fn(c);
  });
  return out;
}

torch::Tensor Strategy::reduce(ReduceOp op, const PerReplica& values,
                               std::optional<std::int64_t> axis) const {
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    throw Error(ErrorCode::kInvalidArgument,
                "Strategy::reduce: only kSum and kAverage (TensorFlow's SUM and MEAN)");
  }
  if (static_cast<int>(values.size()) != num_local_replicas()) {
    throw Error(ErrorCode::kInvalidArgument,
                "Strategy::reduce: " + std::to_string(values.size()) + " values for " +
                    std::to_string(num_local_replicas()) +
                    " local replicas; pass what Strategy::run returned");
  }
  if (axis && *axis != 0) {
    throw Error(ErrorCode::kInvalidArgument, "Strategy::reduce: axis must be none or 0");
  }
  torch::Tensor total;
  double rows = 0;
  for (const auto& v : values) {
    torch::Tensor x = v.detach().to(torch::kCPU);
    if (axis) {
      rows += x.dim() > 0 ? static_cast<double>(x.size(0)) : 1.0;
      x = x.dim() > 0 ? x.sum(0) : x;
    }
    total = total.defined() ? total + x : x.clone();
  }
  if (num_workers() > 1) {
    // Fixed names: the response cache then serves every call after the first.
    const std::string name = "train.reduce";
    total = kolo::allreduce(total.contiguous(), {.name = name, .op = ReduceOp::kSum});
    if (axis && op == ReduceOp::kAverage) {
      torch::Tensor r = torch::tensor({rows}, torch::kFloat64);
      rows = kolo::allreduce(r, {.name = name + ".rows", .op = ReduceOp::kSum}).item<double>();
    }
  }
  if (op == ReduceOp::kAverage) {
    total = total / (axis ? rows : static_cast<double>(num_replicas_in_sync()));
  }
  return total;
}

// --- distribute -------------------------------------------------------------------------

WorkerInput load_worker_input(const Strategy& strategy, const Dataset& data,
                              std::int64_t global_batch, std::int64_t max_steps,
                              const std::string& name) {
  WorkerInput in;
  const int W = strategy.num_workers();
  in.policy = data.auto_shard_policy();
  if (in.policy == AutoShardPolicy::kAuto) {
    in.policy = data.file_based() ? AutoShardPolicy::kFile : AutoShardPolicy::kData;
  }
  if (W == 1) in.policy = AutoShardPolicy::kData;
  in.local = data.load_for_worker(strategy.worker_index(), W);
  if (in.policy == AutoShardPolicy::kFile && W > 1) {
    const std::int64_t per_worker = std::max<std::int64_t>(1, global_batch / W);
    std::int64_t steps = (in.local.size() + per_worker - 1) / per_worker;
    if (max_steps >= 0) steps = std::min(steps, max_steps);
    torch::Tensor t = torch::tensor({steps}, torch::kInt64);
    in.force_steps = kolo::allreduce(t, {.name = name, .op = ReduceOp::kMax}).item<std::int64_t>();
  }
  return in;
}

// --- distribute (the dataset)
// -------------------------------------------------------------------------

DistributedDataset Strategy::distribute(const Dataset& dataset, std::int64_t global_batch_size,
                                        const DistributeOptions& options) const {
  DistributedDataset d;
  WorkerInput in =
      load_worker_input(*this, dataset, global_batch_size, -1, "train.distribute.steps");
  d.data_ = std::move(in.local);
  PlanOptions& o = d.options_;
  o.examples = d.data_.size();
  o.global_batch = global_batch_size;
  o.workers = num_workers();
  o.worker = worker_index();
  o.local_replicas = num_local_replicas();
  o.policy = in.policy;
  o.shuffle = options.shuffle;
  o.seed = options.seed;
  o.force_steps = in.force_steps;
  d.devices_ = devices();
  d.plan_ = plan_epoch(o);
  return d;
}

void DistributedDataset::set_epoch(std::int64_t epoch) {
  options_.epoch = epoch;
  plan_ = plan_epoch(options_);
}

DistributedBatch DistributedDataset::batch(std::int64_t step) const {
  if (step < 0 || step >= plan_.steps) {
    throw Error(ErrorCode::kInvalidArgument, "DistributedDataset: step " + std::to_string(step) +
                                                 " of an epoch of " + std::to_string(plan_.steps));
  }
  DistributedBatch b;
  const auto& pieces = plan_.pieces[static_cast<std::size_t>(step)];
  for (std::size_t r = 0; r < pieces.size(); ++r) {
    b.x.push_back(data_.x().index_select(0, pieces[r]).to(devices_[r]));
    b.y.push_back(data_.y().defined() ? data_.y().index_select(0, pieces[r]).to(devices_[r])
                                      : torch::Tensor());
  }
  return b;
}

// --- the strategies ------------------------------------------------------------------------

OneDeviceStrategy::OneDeviceStrategy(const std::string& device)
    : Strategy(make_impl("one_device", {parse_device(device)}, 1, 0)) {}

MirroredStrategy::MirroredStrategy(const std::vector<std::string>& devices)
    : Strategy(make_impl("mirrored", parse_devices(devices), 1, 0)) {}

namespace {

std::shared_ptr<Strategy::Impl> multi_worker_impl(const CommunicationOptions& options,
                                                  const std::vector<std::string>& devices) {
  std::map<std::string, std::string> settings;
  if (options.bytes_per_pack < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "CommunicationOptions: bytes_per_pack must be >= 0, not " +
                    std::to_string(options.bytes_per_pack));
  }
  if (options.bytes_per_pack > 0) {
    settings["KOLO_FUSION_THRESHOLD"] = std::to_string(options.bytes_per_pack);
  }
  if (options.timeout_seconds) {
    if (*options.timeout_seconds <= 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CommunicationOptions: timeout_seconds must be positive");
    }
    settings["KOLO_PEER_TIMEOUT_SECONDS"] = std::to_string(*options.timeout_seconds);
  }
  if (options.implementation == CommunicationImplementation::kRing) {
    settings["KOLO_TRANSPORT"] = "gloo";
  }
  if (options.implementation == CommunicationImplementation::kNccl &&
      torch::cuda::device_count() == 0) {
    KOLO_LOG(kWarning, "train") << "Enabled NCCL communication but no GPUs detected/specified; "
                                   "using kolo's CPU transports";
  }
  if (kolo::is_initialized() && !settings.empty()) {
    KOLO_LOG(kWarning, "train")
        << "MultiWorkerMirroredStrategy: kolo was already initialized, so its "
           "CommunicationOptions do not apply (set them before kolo::init, or as KOLO_* "
           "variables)";
  }
  kolo::init(settings);
  std::vector<torch::Device> devs;
  if (!devices.empty()) {
    for (const auto& d : devices) devs.push_back(parse_device(d));
  } else if (torch::cuda::device_count() > 0 && kolo::local_size() > 1) {
    devs.push_back(kolo::device());  // one GPU per process, as the founding documents pin
  } else {
    devs = default_devices();
  }
  auto impl = make_impl("multi_worker_mirrored", std::move(devs), kolo::size(), kolo::rank());
  impl->runtime = true;
  impl->options = options;
  return impl;
}

std::shared_ptr<Strategy::Impl> horovod_impl() {
  kolo::init();
  auto impl = make_impl("horovod", {kolo::device()}, kolo::size(), kolo::rank());
  impl->runtime = true;
  impl->horovod = true;
  impl->extended = horovod_extended();
  return impl;
}

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(CommunicationOptions options,
                                                         const std::vector<std::string>& devices)
    : Strategy(multi_worker_impl(options, devices)) {}

HorovodStrategy::HorovodStrategy() : Strategy(horovod_impl()) {}

// --- custom training loops ------------------------------------------------------------------

namespace {

torch::Tensor average_loss(const torch::Tensor& per_example_loss, int num_replicas,
                           const AverageLossOptions& o) {
  const char* who = "compute_average_loss";
  if (!per_example_loss.defined() || per_example_loss.dim() == 0) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(who) +
                    ": per_example_loss must be [batch, ...] (a loss's per_example values), "
                    "not a scalar: a loss already averaged cannot be scaled by the batch");
  }
  torch::Tensor losses = per_example_loss;
  if (o.sample_weight.defined()) {
    // As TensorFlow's weighting: a trailing 1 of the weights is dropped ([batch, 1]
    // weights for [batch] losses) and weights of lower rank weigh whole examples ([batch]
    // weights for [batch, steps] losses); the product must keep the losses' shape.
    torch::Tensor w = o.sample_weight.to(losses.device());
    if (w.dim() == losses.dim() + 1 && w.size(-1) == 1) w = w.squeeze(-1);
    while (w.dim() > 0 && w.dim() < losses.dim()) w = w.unsqueeze(-1);
    bool fits = w.dim() <= losses.dim();
    for (std::int64_t d = 1; fits && d <= w.dim(); ++d) {
      fits = w.size(-d) == 1 || w.size(-d) == losses.size(-d);
    }
    if (!fits) {
      throw Error(
          ErrorCode::kInvalidArgument,
          std::string(who) + ": sample_weight " + shape_string(o.sample_weight.sizes().vec()) +
              " does not fit per_example_loss " + shape_string(per_example_loss.sizes().vec()) +
              " (one weight an example, or one per loss value)");
    }
    losses = losses * w;
  }
  const std::int64_t global =
      o.global_batch_size ? *o.global_batch_size : per_example_loss.size(0) * num_replicas;
  if (global < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(who) + ": global_batch_size " + std::to_string(global) +
                    " is negative; it is the number of examples in one step over all replicas");
  }
  const torch::Tensor sum = losses.sum();
  // A global batch of 0 gives exactly 0, as TensorFlow's divide_no_nan (not NaN for an
  // infinite sum).
  return global == 0 ? (sum * 0).nan_to_num(0.0, 0.0, 0.0) : sum / static_cast<double>(global);
}

}  // namespace

torch::Tensor compute_average_loss(const torch::Tensor& per_example_loss,
                                   const ReplicaContext& context, const AverageLossOptions& o) {
  return average_loss(per_example_loss, context.num_replicas_in_sync, o);
}

torch::Tensor compute_average_loss(const torch::Tensor& per_example_loss,
                                   const AverageLossOptions& o) {
  return average_loss(per_example_loss, 1, o);
}

torch::Tensor scale_regularization_loss(const torch::Tensor& regularization_loss,
                                        const ReplicaContext& context) {
  if (!regularization_loss.defined()) {
    throw Error(ErrorCode::kInvalidArgument,
                "scale_regularization_loss: the regularization loss is undefined");
  }
  return regularization_loss.sum() / static_cast<double>(context.num_replicas_in_sync);
}

std::vector<std::shared_ptr<torch::nn::Module>> Strategy::replicate(
    const std::shared_ptr<torch::nn::Module>& module) const {
  if (!module) throw Error(ErrorCode::kInvalidArgument, "Strategy::replicate: the module is null");
  module->to(devices()[0]);
  if (num_workers() > 1) {
    // TensorFlow creates each variable from the chief's value.
    broadcast_parameters(module->named_parameters(true), 0);
    broadcast_parameters(module->named_buffers(true), 0);
  }
  std::vector<std::shared_ptr<torch::nn::Module>> out = {module};
  for (std::size_t r = 1; r < devices().size(); ++r) {
    try {
      out.push_back(module->clone(devices()[r]));
    } catch (const std::exception& e) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Strategy::replicate: cannot make replica " + std::to_string(r) + " of " +
                      name() + " (" + std::to_string(devices().size()) +
                      " replicas): the module must be cloneable (derive from "
                      "torch::nn::Cloneable, as torch::nn's modules do): " +
                      e.what());
    }
  }
  return out;
}

void Strategy::all_reduce_gradients(const std::vector<std::shared_ptr<torch::nn::Module>>& replicas,
                                    ReduceOp op) const {
  const char* who = "Strategy::all_reduce_gradients";
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(who) + ": only kSum and kAverage (TensorFlow's SUM and MEAN)");
  }
  if (static_cast<int>(replicas.size()) != num_local_replicas()) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(who) + ": " + std::to_string(replicas.size()) + " models for " +
                    std::to_string(num_local_replicas()) +
                    " local replicas; pass what Strategy::replicate returned");
  }
  std::vector<std::vector<torch::Tensor>> params;
  for (const auto& m : replicas) {
    if (!m) throw Error(ErrorCode::kInvalidArgument, std::string(who) + ": a replica is null");
    params.push_back(m->parameters(true));
    if (params.back().size() != params[0].size()) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(who) + ": replica " + std::to_string(params.size() - 1) + " has " +
                      std::to_string(params.back().size()) + " parameters, replica 0 " +
                      std::to_string(params[0].size()) + "; the replicas must be one model's");
    }
  }
  // Which parameters have a gradient on some replica of some worker: the workers agree
  // first (a step may touch other parameters on each), and each reduces the union, with
  // zeros where it has none, so that every tensor of the grouped call is the same
  // parameter on every worker.
  const std::size_t n = params[0].size();
  torch::Tensor has = torch::zeros({static_cast<std::int64_t>(n)}, torch::kFloat32);
  for (std::size_t i = 0; i < n; ++i) {
    for (const auto& replica : params) {
      if (replica[i].grad().defined()) has[static_cast<std::int64_t>(i)] = 1.0f;
    }
    for (std::size_t r = 1; r < params.size(); ++r) {
      if (params[r][i].sizes() != params[0][i].sizes()) {
        throw Error(ErrorCode::kInvalidArgument,
                    std::string(who) + ": parameter " + std::to_string(i) + " of replica " +
                        std::to_string(r) + " has another shape than replica 0's");
      }
    }
  }
  if (num_workers() > 1) {
    has = kolo::allreduce(has, {.name = "train.gradients.present", .op = ReduceOp::kSum});
  }
  // The sum over the local replicas, on the CPU; then over the workers in one grouped call.
  std::vector<std::size_t> which;
  std::vector<torch::Tensor> totals;
  for (std::size_t i = 0; i < n; ++i) {
    if (has[static_cast<std::int64_t>(i)].item<float>() == 0) continue;  // no gradient anywhere
    torch::Tensor total =
        torch::zeros(params[0][i].sizes(), params[0][i].options().device(torch::kCPU));
    for (const auto& replica : params) {
      const torch::Tensor& g = replica[i].grad();
      if (g.defined()) total += g.detach().to(torch::kCPU, total.scalar_type());
    }
    which.push_back(i);
    totals.push_back(total);
  }
  if (num_workers() > 1 && !totals.empty()) {
    totals = kolo::grouped_allreduce(totals, {.name = "train.gradients", .op = ReduceOp::kSum});
  }
  for (std::size_t k = 0; k < which.size(); ++k) {
    torch::Tensor g = totals[k];
    if (op == ReduceOp::kAverage) g = g / static_cast<double>(num_replicas_in_sync());
    for (std::size_t r = 0; r < params.size(); ++r) {
      torch::Tensor& p = params[r][which[k]];
      p.mutable_grad() = g.to(p.device(), p.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    }
  }
}

}  // namespace kolo::train
