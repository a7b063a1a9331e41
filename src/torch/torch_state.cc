// TorchState (kolo/elastic.h): an elastic job's in-memory snapshot of a libtorch model, its
// optimizer, named values and an ElasticSampler's progress; how it is taken, put back and
// made equal across ranks. Not here: when that happens (run and commit, elastic.cc).
//
// Parameters and buffers are kept as tensor copies (refreshed in place from the second
// save on, so a commit allocates nothing). The optimizer's state goes through libtorch's
// optimizer serialization into memory rather than OptimizerParamState::clone(), whose
// copies share their tensors with the live state (Adam's moments are updated in place).
// Loading that state does not set the groups' options (learning rate, ...), so they are
// kept as clones of their own.
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kolo/elastic.h"

namespace kolo::elastic {
namespace {

// The optimizer holding the state: a DistributedOptimizer's wrapped one.
torch::optim::Optimizer& inner(torch::optim::Optimizer& optimizer) {
  if (auto* d = dynamic_cast<DistributedOptimizer*>(&optimizer)) return d->optimizer();
  return optimizer;
}

// Where loaded state tensors go: the first parameter's device (as broadcast_optimizer_state).
c10::optional<torch::Device> parameter_device(torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    if (!group.params().empty()) return group.params().front().device();
  }
  return c10::nullopt;
}

void keep(torch::Tensor& saved, const torch::Tensor& live) {
  if (!live.defined()) {
    saved = torch::Tensor();
  } else if (saved.defined() && saved.sizes() == live.sizes() && saved.dtype() == live.dtype() &&
             saved.device() == live.device()) {
    saved.copy_(live);
  } else {
    saved = live.detach().clone();
  }
}

void put_back(const std::vector<torch::Tensor>& saved, const std::vector<torch::Tensor>& live,
              const char* what) {
  if (saved.size() != live.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("TorchState::restore: the model has ") + std::to_string(live.size()) +
                    " " + what + ", the snapshot " + std::to_string(saved.size()) +
                    "; build the model completely before creating its TorchState");
  }
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (saved[i].defined() && live[i].defined()) {
      torch::Tensor t = live[i];
      t.copy_(saved[i]);
    }
  }
}

}  // namespace

struct TorchState::Snapshot {
  std::vector<torch::Tensor> parameters, buffers;  // in model.parameters()/buffers() order
  std::string optimizer_state;                     // libtorch's optimizer archive
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;  // per group
  std::map<std::string, std::int64_t> values;
};

TorchState::TorchState(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                       std::map<std::string, std::int64_t> values)
    : model_(model), optimizer_(optimizer), values_(std::move(values)) {
  snapshot_locally();
}

TorchState::~TorchState() = default;

std::int64_t& TorchState::value(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) {
    std::string names;
    for (const auto& [n, v] : values_) names += (names.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::kInvalidArgument,
                "TorchState: no value '" + name +
                    "' (it has: " + (names.empty() ? std::string("none") : names) +
                    "); name every value in the TorchState constructor");
  }
  return it->second;
}

std::int64_t TorchState::value(const std::string& name) const {
  return const_cast<TorchState*>(this)->value(name);
}

void TorchState::attach(ElasticSampler& sampler) {
  sampler_ = &sampler;
  // The sampler's snapshot is its saved progress: make it the present one.
  sampler.load_progress(sampler.progress(), sampler.num_replicas(), sampler.rank());
}

void TorchState::snapshot_locally() {
  auto next = std::make_unique<Snapshot>();
  // The part that may fail first, so that a failure leaves the previous snapshot whole.
  {
    torch::serialize::OutputArchive archive;
    optimizer_.save(archive);  // a DistributedOptimizer passes on a learning rate set on it
    std::ostringstream out;
    archive.save_to(out);
    next->optimizer_state = out.str();
  }
  for (const auto& group : inner(optimizer_).param_groups()) {
    next->options.push_back(group.has_options() ? group.options().clone() : nullptr);
  }
  next->values = values_;
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> parameters = model_.parameters();
  const std::vector<torch::Tensor> buffers = model_.buffers();
  if (saved_) {
    next->parameters = std::move(saved_->parameters);
    next->buffers = std::move(saved_->buffers);
  }
  next->parameters.resize(parameters.size());
  next->buffers.resize(buffers.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) keep(next->parameters[i], parameters[i]);
  for (std::size_t i = 0; i < buffers.size(); ++i) keep(next->buffers[i], buffers[i]);
  saved_ = std::move(next);
}

void TorchState::save_state() {
  if (sampler_) sampler_->save_progress();  // collective: may throw, then nothing changed
  snapshot_locally();
}

void TorchState::restore_state() {
  const Snapshot& s = *saved_;
  {
    torch::NoGradGuard no_grad;
    put_back(s.parameters, model_.parameters(), "parameters");
    put_back(s.buffers, model_.buffers(), "buffers");
  }
  // Options first: loading a DistributedOptimizer then copies them to its own groups.
  torch::optim::Optimizer& holder = inner(optimizer_);
  auto& groups = holder.param_groups();
  for (std::size_t i = 0; i < groups.size() && i < s.options.size(); ++i) {
    if (s.options[i]) groups[i].set_options(s.options[i]->clone());
  }
  holder.state().clear();  // loading only adds state
  torch::serialize::InputArchive archive;
  std::istringstream in(s.optimizer_state);
  const c10::optional<torch::Device> device = parameter_device(holder);
  if (device) {
    archive.load_from(in, *device);
  } else {
    archive.load_from(in);
  }
  optimizer_.load(archive);
  values_ = s.values;
  if (sampler_) sampler_->restore_progress();
}

void TorchState::sync_from(int root) {
  broadcast_parameters(model_.named_parameters(), root);
  broadcast_buffers(model_, root);
  broadcast_optimizer_state(optimizer_, root);
  c10::Dict<std::string, std::int64_t> mine;
  for (const auto& [name, v] : values_) mine.insert(name, v);
  const torch::IValue theirs = broadcast_object(torch::IValue(mine), root, "elastic.values");
  std::map<std::string, std::int64_t> values;
  for (const auto& item : theirs.toGenericDict()) {
    values[item.key().toStringRef()] = item.value().toInt();
  }
  values_ = std::move(values);
  if (sampler_) sampler_->sync_progress(root);
  snapshot_locally();
}

}  // namespace kolo::elastic
