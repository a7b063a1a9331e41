// The parameter-server API around the strategy (parameter_server.h): tensors as step
// bytes, ClusterResolver (the cluster from TF_CONFIG), and the chief's ClusterCoordinator
// with its RemoteValues over ps::Coordinator. (The VariablePartitioners are src/ps's.)
//
// Not for: the strategy's tasks, variables and serving (parameter_server.cc).
#include <cstring>
#include <memory>

#include "common/coding.h"
#include "kolo/error.h"
#include "kolo/torch.h"
#include "kolo/train/parameter_server.h"
#include "ps/coordinator.h"
#include "startup/tf_config.h"
#include "train/strategies/ps_impl.h"
#include "train/strategies/strategy_impl.h"

namespace kolo::train {

// ---------------------------------------------------------------- tensors as bytes

std::string encode_tensor(const torch::Tensor& t) {
  if (!t.defined()) return std::string();
  const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
  const auto dtype = static_cast<std::uint8_t>(to_kolo_dtype(c.scalar_type()));
  const auto dims = static_cast<std::uint8_t>(c.dim());
  // dtype, number of dims, each dim (int64), then the bytes (common/coding.h's forms).
  std::string out;
  coding::put(&out, dtype);
  coding::put(&out, dims);
  for (std::int64_t d : c.sizes()) coding::put(&out, d);
  out.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  return out;
}

torch::Tensor decode_tensor(const std::string& bytes) {
  if (bytes.empty()) return torch::Tensor();
  if (bytes.size() < 2) throw Error(ErrorCode::kInvalidArgument, "a step's tensor is truncated");
  coding::ByteReader r(bytes);
  std::uint8_t code = 0, dims = 0;
  r.get(&code);
  r.get(&dims);
  const auto dtype = static_cast<DataType>(code);
  if (code >= kNumDataTypes || r.left() < 8 * std::size_t(dims)) {
    throw Error(ErrorCode::kInvalidArgument, "a step's tensor has a bad header");
  }
  std::vector<std::int64_t> shape(dims);
  for (std::int64_t& d : shape) r.get(&d);
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw Error(ErrorCode::kInvalidArgument, "a step's tensor has a negative size");
    n *= d;
  }
  const std::size_t offset = r.position();
  if (bytes.size() - offset != std::size_t(n) * dtype_size(dtype)) {
    throw Error(ErrorCode::kInvalidArgument, "a step's tensor has the wrong number of bytes");
  }
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(to_torch_dtype(dtype)));
  std::memcpy(t.data_ptr(), bytes.data() + offset, bytes.size() - offset);
  return t;
}

// ---------------------------------------------------------------- ClusterResolver

ClusterResolver::ClusterResolver(ClusterSpec cluster, std::string task_type, int task_index)
    : cluster_(std::move(cluster)), type_(std::move(task_type)), index_(task_index) {
  const auto* tasks = type_ == "chief"       ? &cluster_.chief
                      : type_ == "worker"    ? &cluster_.worker
                      : type_ == "ps"        ? &cluster_.ps
                      : type_ == "evaluator" ? &cluster_.evaluator
                                             : nullptr;
  if (tasks == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                "ClusterResolver: unknown task type '" + type_ +
                    "' (the task types are chief, worker, ps and evaluator)");
  }
  if (type_ != "evaluator" && (index_ < 0 || index_ >= static_cast<int>(tasks->size()))) {
    throw Error(ErrorCode::kInvalidArgument,
                "ClusterResolver: task index " + std::to_string(index_) + " is out of range for " +
                    std::to_string(tasks->size()) + " '" + type_ + "' tasks");
  }
}

ClusterResolver ClusterResolver::from_tf_config() {
  core::TfConfig tf;
  bool present = false;
  check_status(
      core::parse_tf_config_from_env(&tf, &present));  // TensorFlow's validation and messages
  if (!present) {
    throw Error(ErrorCode::kInvalidArgument,
                "ClusterResolver: TF_CONFIG is not set; a parameter-server job needs it in every "
                "task (kolorun --ps N -np M PROGRAM sets it), or build a ClusterResolver "
                "from a ClusterSpec");
  }
  if (tf.task_type.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "ClusterResolver: TF_CONFIG has no \"task\"; every task of a parameter-server "
                "job needs its type and index");
  }
  ClusterSpec c{tf.cluster.chief, tf.cluster.worker, tf.cluster.ps, tf.cluster.evaluator};
  return ClusterResolver(std::move(c), tf.task_type, tf.task_index);
}

// ---------------------------------------------------------------- the coordinator

struct RemoteValue::Impl {
  ps::RemoteValue value;
};

torch::Tensor RemoteValue::fetch() const {
  if (!impl_) throw Error(ErrorCode::kInvalidArgument, "RemoteValue: never scheduled");
  std::string bytes;
  check_status(impl_->value.fetch(&bytes));
  return decode_tensor(bytes);
}
bool RemoteValue::ready() const { return impl_ && impl_->value.ready(); }
int RemoteValue::worker() const { return impl_ ? impl_->value.worker() : -1; }
int RemoteValue::attempts() const { return impl_ ? impl_->value.attempts() : 0; }

struct ClusterCoordinator::Impl {
  std::shared_ptr<ParameterServerStrategy::PsImpl> ps;
  ps::Coordinator* coordinator = nullptr;
};

ClusterCoordinator::ClusterCoordinator(const ParameterServerStrategy& strategy)
    : impl_(std::make_unique<Impl>()) {
  impl_->ps = strategy.impl_->ps;
  impl_->coordinator = &impl_->ps->coordinator_for_chief();
}

// The workers and ps tasks are told to stop when the chief's strategy ends (its last
// handle), so that fit and evaluate may still run after this coordinator.
ClusterCoordinator::~ClusterCoordinator() = default;

RemoteValue ClusterCoordinator::schedule(const std::string& step, const torch::Tensor& args) {
  auto v = std::make_shared<RemoteValue::Impl>();
  check_status(impl_->coordinator->schedule(step, encode_tensor(args), &v->value));
  return RemoteValue(v);
}

void ClusterCoordinator::join() { check_status(impl_->coordinator->join()); }
bool ClusterCoordinator::done() const { return impl_->coordinator->done(); }
int ClusterCoordinator::workers_up() const { return impl_->coordinator->workers_up(); }
std::int64_t ClusterCoordinator::worker_failures() const {
  return impl_->coordinator->worker_failures();
}
std::int64_t ClusterCoordinator::worker_rejoins() const {
  return impl_->coordinator->worker_rejoins();
}

}  // namespace kolo::train
