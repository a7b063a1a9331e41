// DistributedOptimizer: averages gradients across ranks while backward still runs.
//
// Each parameter has two hooks. A tensor hook (before autograd accumulates into .grad)
// counts backward passes and refuses a gradient that would land in a .grad whose
// allreduce is already running. A post-hook on the parameter's gradient accumulator (after
// accumulation) submits .grad itself, in place, as a named allreduce on the last of
// `backward_passes_per_step` passes and returns at once, so communication overlaps the
// rest of backward with no copy of the gradient. synchronize() reduces parameters that got
// no gradient (as zeros, so every rank submits the same names) and waits for every
// allreduce. zero_grad() before step() (a skipped step) finishes and discards the step's
// allreduces. As a torch::optim::Optimizer it keeps copies of the wrapped optimizer's
// parameter groups, so that learning-rate schedulers can set their options; step() passes
// a changed learning rate on and copies the options back. A process-wide registry of the
// tensor names and parameters that live DistributedOptimizers hold turns a clash (two
// optimizers with one name_prefix, or one parameter wrapped twice) into an error at
// construction instead of a "duplicate name" from inside a backward pass.
// Not for: broadcasting initial state (broadcast.cc).
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "kolo/torch.h"

namespace kolo {

struct DistributedOptimizer::Param {
  std::string name;
  torch::Tensor tensor;
  bool hooked = false;
  unsigned hook = 0;                                   // tensor hook (before accumulation)
  std::shared_ptr<torch::autograd::Node> accumulator;  // held so the post-hook stays
  std::uintptr_t post_hook = 0;
  int passes = 0;          // gradients seen since the last synchronize
  bool submitted = false;  // this step's gradient is final (and reduced or reducing)
  TorchHandle handle;      // valid while this step's allreduce is in flight (or not yet waited)
  // An elastic job's generation ended before this step's allreduce could be submitted
  // (kolo::WorkersChanged from inside backward): rethrown by synchronize(), which resets
  // every parameter for the next step, so that elastic::run can restore and go on.
  std::exception_ptr submit_error;
  // .grad as submitted: a later change means something else zeroed or replaced it.
  const void* submitted_grad = nullptr;
  std::int64_t submitted_version = 0;
  bool communicating() const { return handle.handle().valid(); }
};

namespace {

// Runs after the gradient accumulator has added this pass's gradient into .grad.
class AfterAccumulation : public torch::autograd::FunctionPostHook {
 public:
  explicit AfterAccumulation(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

// Tensor names and parameters held by the live DistributedOptimizers of this process.
// Leaked on purpose: a static optimizer may outlive any static registry.
struct Registry {
  std::mutex mu;
  std::unordered_set<std::string> names;
  std::unordered_map<const void*, std::string> params;  // parameter -> its tensor name
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

std::optional<double> lr_of(const torch::optim::OptimizerOptions& o) {
  try {
    return o.get_lr();
  } catch (const c10::Error&) {  // options of a custom optimizer without get_lr()
    return std::nullopt;
  }
}

std::vector<torch::optim::OptimizerParamGroup> groups_of(torch::optim::Optimizer& o) {
  return {o.param_groups().begin(), o.param_groups().end()};  // copies the options
}

// What a user of two DistributedOptimizers (a GAN) needs to hear when one's backward
// pass reaches the other's parameters.
const char* const kOtherModel =
    " If the extra backward pass was another model's (a GAN generator's loss flowing back "
    "through the discriminator), freeze these parameters (requires_grad_(false)) while the "
    "other model trains, or detach their output from its loss.";

}  // namespace

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           const NamedTensors& named_parameters,
                                           DistributedOptimizerOptions options)
    : torch::optim::Optimizer(groups_of(optimizer), optimizer.defaults().clone()),
      optimizer_(optimizer),
      options_(std::move(options)) {
  if (options_.backward_passes_per_step < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "DistributedOptimizer: backward_passes_per_step must be >= 1, got " +
                    std::to_string(options_.backward_passes_per_step));
  }
  if (options_.op != ReduceOp::kAverage && options_.op != ReduceOp::kSum) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("DistributedOptimizer: op must be average or sum, got ") +
                    reduce_op_name(options_.op));
  }
  if (options_.gradient_predivide_factor <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "DistributedOptimizer: gradient_predivide_factor must be > 0, got " +
                    std::to_string(options_.gradient_predivide_factor));
  }
  if (options_.gradient_predivide_factor != 1.0 && options_.op != ReduceOp::kAverage) {
    // As in Horovod: predividing only splits the averaging into two scalings.
    throw Error(ErrorCode::kInvalidArgument,
                "DistributedOptimizer: gradient_predivide_factor " +
                    std::to_string(options_.gradient_predivide_factor) +
                    " needs op = average (it splits the division by the number of workers); "
                    "with op = sum leave it at 1");
  }
  if (options_.process_set != kGlobalProcessSet) {
    try {
      set_ = kolo::process_set(options_.process_set);
    } catch (const Error& e) {
      throw Error(e.code(), std::string("DistributedOptimizer: ") + e.what());
    }
    if (!set_.included()) {
      std::string members;
      for (int r : set_.ranks()) members += (members.empty() ? "" : ", ") + std::to_string(r);
      throw Error(ErrorCode::kInvalidArgument,
                  "DistributedOptimizer: rank " + std::to_string(kolo::rank()) +
                      " is not a member of process set " + std::to_string(set_.id()) + " (ranks " +
                      members +
                      "); only the set's members may build an optimizer that averages over it");
    }
  }
  std::unordered_set<std::string> names;
  std::unordered_map<const void*, std::string> named;  // tensor -> its name
  for (const auto& item : named_parameters) {
    if (item.key().empty())
      throw Error(ErrorCode::kInvalidArgument,
                  "DistributedOptimizer: a parameter has an empty name");
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
    if (!item.value().is_leaf()) {
      // Only leaves have a gradient accumulator to hook (checked before any hook exists).
      throw Error(ErrorCode::kInvalidArgument,
                  "DistributedOptimizer: parameter '" + item.key() +
                      "' is not a leaf tensor (it was computed from other tensors); pass the "
                      "model's own parameters");
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
  if (dynamic_cast<torch::optim::LBFGS*>(&optimizer_) != nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                "DistributedOptimizer: LBFGS evaluates the loss several times per step, and "
                "each backward pass would be reduced; use a first-order optimizer (SGD, "
                "Adam, ...)");
  }
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& p : params_) {
      const std::string full = options_.name_prefix + p->name;
      if (auto it = r.params.find(p->tensor.unsafeGetTensorImpl()); it != r.params.end()) {
        throw Error(ErrorCode::kInvalidArgument,
                    "DistributedOptimizer: parameter '" + p->name +
                        "' already belongs to another live DistributedOptimizer (as tensor '" +
                        it->second +
                        "'); wrap each parameter once: one DistributedOptimizer per optimizer, "
                        "each over its own parameters");
      }
      if (r.names.count(full) != 0) {
        throw Error(ErrorCode::kInvalidArgument,
                    "DistributedOptimizer: tensor name '" + full + "' (name_prefix '" +
                        options_.name_prefix + "' + parameter '" + p->name +
                        "') is already used by another live DistributedOptimizer; give each "
                        "DistributedOptimizer its own DistributedOptimizerOptions::name_prefix "
                        "(e.g. \"generator.\" and \"discriminator.\")");
      }
    }
    for (const auto& p : params_) {
      const std::string full = options_.name_prefix + p->name;
      r.names.insert(full);
      r.params.emplace(p->tensor.unsafeGetTensorImpl(), full);
      claimed_.push_back(full);
    }
  }
  for (const auto& group : optimizer_.param_groups())
    shared_lrs_.push_back(lr_of(group.options()).value_or(std::nan("")));
  ensure_hooks();
}

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           torch::nn::Module& module,
                                           DistributedOptimizerOptions options)
    : DistributedOptimizer(optimizer, module.named_parameters(), std::move(options)) {
  if (!options_.broadcast_buffers) return;
  buffers_ = module.named_buffers();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& item : buffers_) {
    const std::string full = "buffer:" + options_.name_prefix + item.key();
    if (!r.names.insert(full).second) {
      throw Error(ErrorCode::kInvalidArgument,
                  "DistributedOptimizer: buffer tensor name '" + full +
                      "' is already used by another live DistributedOptimizer; give each its "
                      "own name_prefix");
    }
    claimed_.push_back(full);
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& name : claimed_) r.names.erase(name);
    for (const auto& p : params_) {
      auto it = r.params.find(p->tensor.unsafeGetTensorImpl());
      if (it != r.params.end() && it->second == options_.name_prefix + p->name) r.params.erase(it);
    }
  }
  for (auto& p : params_) {
    if (p->hooked) {
      p->tensor.remove_hook(p->hook);
      p->accumulator->del_post_hook(p->post_hook);
    }
    // Never leave an allreduce writing into memory we no longer track.
    if (p->communicating()) {
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
    p->accumulator = torch::autograd::impl::grad_accumulator(p->tensor);  // a leaf: never null
    p->hook = p->tensor.register_hook(
        [this, param](const torch::Tensor& g) { return before_accumulation(*param, g); });
    p->post_hook = p->accumulator->add_post_hook(
        std::make_unique<AfterAccumulation>([this, param] { after_accumulation(*param); }));
    p->hooked = true;
  }
}

torch::Tensor DistributedOptimizer::before_accumulation(Param& p, const torch::Tensor& incoming) {
  synchronized_ = false;
  if (p.submitted) {
    // Accumulating now would change .grad under its running allreduce.
    const torch::Tensor& grad = p.tensor.grad();
    const std::string n = std::to_string(options_.backward_passes_per_step);
    if (!grad.defined() || grad.unsafeGetTensorImpl() != p.submitted_grad ||
        grad._version() != p.submitted_version) {
      throw Error(
          ErrorCode::kInvalidArgument,
          "DistributedOptimizer (name_prefix '" + options_.name_prefix + "'): parameter '" +
              p.name +
              "' got a gradient, but its .grad was zeroed or replaced after its allreduce for "
              "this step started, by something other than this DistributedOptimizer (a "
              "module's zero_grad(), or torch::optim::Optimizer::zero_grad() called through an "
              "Optimizer&: it is not virtual). To skip a step after backward(), call zero_grad() "
              "on the kolo::DistributedOptimizer itself: it finishes the step's allreduces "
              "first; then start the next step." +
              kOtherModel);
    }
    throw Error(
        ErrorCode::kInvalidArgument,
        "DistributedOptimizer (name_prefix '" + options_.name_prefix + "'): parameter '" + p.name +
            "' got a gradient after its allreduce started: more than "
            "backward_passes_per_step = " +
            n + " backward passes before step() or synchronize(); call step() after every " + n +
            " passes or raise backward_passes_per_step." + kOtherModel);
  }
  ++p.passes;
  // Autograd may hand two parameters views of one buffer (e.g. the gradients of
  // a.reshape(..) + b.reshape(..)) and, when .grad is empty, adopt a view whose layout
  // matches the parameter as .grad without copying. Two such .grads share memory, so their
  // in-place allreduces would reduce it twice (a doubled sum). A copy of such a view is
  // adopted instead: the copy autograd would otherwise have made for any other view.
  if (incoming.is_view() && !p.tensor.grad().defined() && incoming.strides() == p.tensor.strides())
    return incoming.clone();
  return {};  // undefined: autograd accumulates `incoming` itself
}

void DistributedOptimizer::after_accumulation(Param& p) {
  // The pass that just accumulated was the last one of this step (a later one is refused
  // before it accumulates, so this runs at most once per step with `submitted` false).
  if (p.submitted || p.passes < options_.backward_passes_per_step) return;
  torch::Tensor grad = p.tensor.grad();
  if (grad.is_sparse()) {
    if (!options_.sparse_as_dense) {
      throw Error(ErrorCode::kInvalidArgument,
                  "DistributedOptimizer: parameter '" + p.name +
                      "' got a sparse gradient (e.g. an Embedding with sparse=true); kolo "
                      "reduces dense gradients: set DistributedOptimizerOptions::sparse_as_dense "
                      "= true, or make the module's gradient dense");
    }
    torch::NoGradGuard no_grad;
    grad = grad.to_dense();
    p.tensor.mutable_grad() = grad;
  }
  submit(p, grad);
}

void DistributedOptimizer::submit(Param& p, torch::Tensor& grad) {
  p.submitted = true;
  // One worker: .grad already is the average (or sum), so there is nothing to send, as
  // Horovod's optimizer registers no hooks at size 1. Compression still runs (its rounding
  // is part of what the user asked for).
  if (workers() == 1 && options_.compression == Compression::kNone) {
    p.submitted_grad = grad.unsafeGetTensorImpl();
    p.submitted_version = grad._version();
    return;
  }
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
  o.process_set = options_.process_set;
  try {
    p.handle = allreduce_async_(grad, o);
  } catch (const WorkersChanged&) {
    p.submit_error = std::current_exception();
  }
  p.submitted_grad = grad.unsafeGetTensorImpl();
  p.submitted_version = grad._version();  // after the allreduce's own version bump
}

void DistributedOptimizer::synchronize() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    if (p->submitted) continue;
    // No gradient this step (unused parameter, frozen, fewer passes): reduce what .grad
    // holds, or zeros, so every rank submits the same names. A parameter that needs a
    // gradient gets the zeros as its .grad; otherwise they are reduced and dropped.
    torch::Tensor g = p->tensor.grad();
    if (!g.defined()) {
      g = torch::zeros_like(p->tensor);
      if (p->tensor.requires_grad()) p->tensor.mutable_grad() = g;
    }
    submit(*p, g);
  }
  last_times_.clear();
  // Every handle is waited for even after one failed (e.g. a shape that differs between
  // ranks), so that the optimizer starts the next step clean and the error that reaches
  // the caller is the first one, not a consequence of it.
  std::exception_ptr first_error;
  for (auto& p : params_) {
    if (p->submit_error) {
      if (!first_error) first_error = p->submit_error;
      p->submit_error = nullptr;
    }
    if (p->communicating()) {
      try {
        p->handle.wait();  // in place: .grad now holds the reduced gradient
      } catch (...) {
        if (!first_error) first_error = std::current_exception();
      }
      last_times_.push_back(p->handle.handle().times());
    }
    p->submitted = false;
    p->passes = 0;
    p->handle = TorchHandle();
  }
  ensure_hooks();
  if (first_error) std::rethrow_exception(first_error);
  synchronized_ = true;  // until the next backward pass: step() need not reduce again
}

torch::Tensor DistributedOptimizer::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  // The buffers travel while the gradients are still being reduced; every handle is
  // waited for whatever fails, so that no name stays in flight into the next step.
  std::vector<TorchHandle> buffers;
  std::exception_ptr error;
  try {
    buffers = broadcast_buffers_async();
  } catch (const WorkersChanged&) {
    error = std::current_exception();  // the gradients' handles are still reset below
  }
  try {
    // After an explicit synchronize() (e.g. to clip gradients) the gradients are already
    // reduced; reducing them again would sum twice (Horovod warns and does).
    if (!skip_sync_ && !synchronized_) synchronize();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  for (auto& h : buffers) {
    try {
      h.wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  synchronized_ = false;
  share_options();
  optimizer_.step();
  return loss;
}

std::vector<TorchHandle> DistributedOptimizer::broadcast_buffers_async() {
  std::vector<TorchHandle> handles;
  if (buffers_.is_empty() || workers() == 1) return handles;
  torch::NoGradGuard no_grad;
  for (const auto& item : buffers_) {
    torch::Tensor b = item.value();
    if (!b.defined()) continue;  // a module may register an undefined buffer
    BroadcastOptions o;
    o.name = "buffer:" + options_.name_prefix + item.key();
    o.root = set_.id() < 0 ? 0 : set_.ranks().front();  // the set's first rank
    o.process_set = options_.process_set;
    handles.push_back(broadcast_async_(b, o));
  }
  return handles;
}

void DistributedOptimizer::share_options() {
  auto& theirs = optimizer_.param_groups();
  if (theirs.size() != param_groups_.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                "DistributedOptimizer: the wrapped optimizer has " + std::to_string(theirs.size()) +
                    " parameter groups and the DistributedOptimizer " +
                    std::to_string(param_groups_.size()) +
                    "; add parameter groups to the optimizer before wrapping it");
  }
  for (std::size_t i = 0; i < theirs.size(); ++i) {
    const std::optional<double> mine = lr_of(param_groups_[i].options());
    if (mine && !(*mine == shared_lrs_[i])) theirs[i].options().set_lr(*mine);
    param_groups_[i].set_options(theirs[i].options().clone());
    shared_lrs_[i] = lr_of(theirs[i].options()).value_or(std::nan(""));
  }
}

void DistributedOptimizer::save(torch::serialize::OutputArchive& archive) const {
  // A learning rate a scheduler set on this object belongs in the saved options.
  const_cast<DistributedOptimizer*>(this)->share_options();
  optimizer_.save(archive);
}

void DistributedOptimizer::load(torch::serialize::InputArchive& archive) {
  optimizer_.load(archive);
  auto& theirs = optimizer_.param_groups();
  for (std::size_t i = 0; i < theirs.size() && i < param_groups_.size(); ++i) {
    param_groups_[i].set_options(theirs[i].options().clone());
    shared_lrs_[i] = lr_of(theirs[i].options()).value_or(std::nan(""));
  }
}

void DistributedOptimizer::zero_grad() {
  const bool reducing =
      std::any_of(params_.begin(), params_.end(), [](const auto& p) { return p->submitted; });
  if (!reducing) {
    // Nothing communicated yet (or already synchronized): the passes counted so far are
    // dropped with their gradients, so the next step accumulates all of its passes.
    for (auto& p : params_) p->passes = 0;
    optimizer_.zero_grad();
    return;
  }
  // backward() without step(): a skipped step. The allreduces already submitted cannot be
  // withdrawn (the other ranks take part in them), so this one finishes the step's
  // communication as synchronize() does, submitting what is left so that a rank that
  // does step() is not left waiting for it, and throws the results away with the
  // gradients. Horovod raises here instead; discarding lets the usual "skip a bad batch"
  // loop run unchanged.
  try {
    synchronize();
  } catch (const Error& e) {
    optimizer_.zero_grad();
    synchronized_ = false;
    throw_error(e.code(),
                std::string("DistributedOptimizer::zero_grad() after backward() without step(): "
                            "discarding this step's gradients, a reduction failed (the "
                            "gradients are zeroed and the next step starts clean): ") +
                    e.what());
  }
  optimizer_.zero_grad();
  synchronized_ = false;  // nothing reduced is left: the next step() reduces what it finds
}

std::vector<Handle::Times> DistributedOptimizer::last_times() const { return last_times_; }

void broadcast_buffers(const torch::nn::Module& module, int root) {
  torch::NoGradGuard no_grad;
  std::vector<TorchHandle> handles;
  for (const auto& item : module.named_buffers()) {
    torch::Tensor b = item.value();
    if (!b.defined()) continue;
    BroadcastOptions o;
    o.name = "broadcast.buffer." + item.key();
    o.root = root;
    handles.push_back(broadcast_async_(b, o));
  }
  std::exception_ptr error;
  for (auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace kolo
