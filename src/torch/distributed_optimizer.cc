// DistributedOptimizer: averages gradients across ranks while backward still runs.
//
// A hook on every parameter sees its gradient as autograd produces it; on the last of
// `backward_passes_per_step` passes the hook submits the parameter's full gradient
// (what .grad will hold) as a named allreduce and returns at once, so communication
// overlaps the rest of backward. synchronize() reduces parameters that got no gradient
// (as zeros, so every rank submits the same names), waits for every allreduce and writes
// the results into .grad. Not for: broadcasting initial state (broadcast.cc).
#include <unordered_map>
#include <unordered_set>

#include "kolo/torch.h"

namespace kolo {

struct DistributedOptimizer::Param {
  std::string name;
  torch::Tensor tensor;
  bool hooked = false;
  unsigned hook = 0;
  int passes = 0;        // gradients seen since the last synchronize
  bool submitted = false;
  TorchHandle handle;
};

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           const NamedTensors& named_parameters,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  if (options_.backward_passes_per_step < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "DistributedOptimizer: backward_passes_per_step must be >= 1, got " +
                    std::to_string(options_.backward_passes_per_step));
  }
  if (options_.op != ReduceOp::kAverage && options_.op != ReduceOp::kSum) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("DistributedOptimizer: op must be average or sum, got ") + reduce_op_name(options_.op));
  }
  if (options_.gradient_predivide_factor <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "DistributedOptimizer: gradient_predivide_factor must be > 0");
  }
  std::unordered_set<std::string> names;
  std::unordered_map<const void*, std::string> named;  // tensor -> its name
  for (const auto& item : named_parameters) {
    if (item.key().empty()) throw Error(ErrorCode::kInvalidArgument, "DistributedOptimizer: a parameter has an empty name");
    if (!names.insert(item.key()).second) {
      throw Error(ErrorCode::kInvalidArgument,
                  "DistributedOptimizer: parameter name '" + item.key() +
                      "' appears twice; every parameter needs a unique name");
    }
    auto [it, fresh] = named.emplace(item.value().unsafeGetTensorImpl(), item.key());
    if (!fresh) {
      throw Error(ErrorCode::kInvalidArgument,
                  "DistributedOptimizer: parameters '" + item.key() + "' and '" + it->second +
                      "' are the same tensor; name each parameter once");
    }
    auto p = std::make_unique<Param>();
    p->name = item.key();
    p->tensor = item.value();
    params_.push_back(std::move(p));
  }
  std::size_t unnamed = 0;
  for (const auto& group : optimizer_.param_groups()) {
    for (const auto& t : group.params()) unnamed += !named.count(t.unsafeGetTensorImpl());
  }
  if (unnamed > 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "DistributedOptimizer: " + std::to_string(unnamed) +
                    " of the optimizer's parameters are not among the named parameters; pass "
                    "model->named_parameters() covering every parameter the optimizer updates");
  }
  ensure_hooks();
}

DistributedOptimizer::~DistributedOptimizer() {
  for (auto& p : params_) {
    if (p->hooked) p->tensor.remove_hook(p->hook);
    // Never leave an allreduce writing into memory we no longer track.
    if (p->submitted) {
      try {
        p->handle.wait();
      } catch (const std::exception&) {
      }
    }
  }
}

void DistributedOptimizer::ensure_hooks() {
  // requires_grad may change between steps: hook parameters that now need it.
  for (auto& p : params_) {
    if (p->hooked || !p->tensor.requires_grad()) continue;
    Param* param = p.get();
    p->hook = p->tensor.register_hook([this, param](const torch::Tensor& grad) { on_gradient(*param, grad); });
    p->hooked = true;
  }
}

void DistributedOptimizer::on_gradient(Param& p, const torch::Tensor& incoming) {
  if (p.submitted) return;  // a backward after the last pass: reduced already
  if (++p.passes < options_.backward_passes_per_step) return;
  // The hook runs before autograd adds `incoming` to .grad: .grad will be old + incoming.
  torch::NoGradGuard no_grad;
  const torch::Tensor old = p.tensor.grad();
  submit(p, old.defined() ? old + incoming : incoming.clone());
}

void DistributedOptimizer::submit(Param& p, torch::Tensor grad) {
  AllreduceOptions o;
  o.name = options_.name_prefix + p.name;
  o.op = options_.op;
  if (options_.op == ReduceOp::kAverage && options_.gradient_predivide_factor != 1.0) {
    // average = (f / size) * sum(grad / f): smaller partial sums for low precision wires.
    o.prescale_factor = 1.0 / options_.gradient_predivide_factor;
    o.postscale_factor = options_.gradient_predivide_factor;
  }
  // The runtime compresses float32/float64 while packing the fusion buffer (one pass).
  o.compression = options_.compression;
  p.handle = allreduce_async(grad, o);
  p.submitted = true;
}

void DistributedOptimizer::synchronize() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    if (p->submitted) continue;
    // No gradient this step (unused parameter, frozen, fewer passes): reduce what .grad
    // holds, or zeros, so every rank submits the same names.
    const torch::Tensor g = p->tensor.grad();
    submit(*p, g.defined() ? g.detach().clone() : torch::zeros_like(p->tensor));
  }
  last_times_.clear();
  for (auto& p : params_) {
    torch::Tensor reduced = p->handle.wait();
    last_times_.push_back(p->handle.handle().times());
    if (reduced.scalar_type() != p->tensor.scalar_type()) reduced = reduced.to(p->tensor.scalar_type());
    if (p->tensor.requires_grad() || p->tensor.grad().defined()) p->tensor.mutable_grad() = reduced;
    p->submitted = false;
    p->passes = 0;
    p->handle = TorchHandle();
  }
  ensure_hooks();
}

void DistributedOptimizer::step() {
  if (!skip_sync_) synchronize();
  optimizer_.step();
}

void DistributedOptimizer::zero_grad() { optimizer_.zero_grad(); }

std::vector<Handle::Times> DistributedOptimizer::last_times() const { return last_times_; }

}  // namespace kolo
