// Collectives on torch::Tensor: staging to contiguous host memory (or, on the device
// path, CUDA tensors as they are, ordered with the caller's stream by events), views for
// the core, results back as tensors, and the autograd functions that make allreduce,
// allgather and broadcast differentiable. Not for: optimizers (distributed_optimizer.cc)
// or object broadcasts (broadcast.cc).
//
// CUDA streams go through c10's device-agnostic interface (VirtualGuardImpl:
// CUDA's implementation registers itself when libtorch has CUDA), so this file needs no
// CUDA headers and builds against a CPU-only libtorch.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "kolo/torch.h"

namespace kolo {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// An event recorded on the current stream of a device, known by its native handle (a
// cudaEvent_t) for TensorView::ready_event. (c10::Event does not give the handle in
// libtorch 1.13.)
class ReadyEvent {
 public:
  explicit ReadyEvent(const torch::Device& device) : impl_(device.type()), index_(device.index()) {
    impl_.record(&event_, impl_.getStream(device), index_, c10::EventFlag::PYTORCH_DEFAULT);
  }
  ~ReadyEvent() {
    if (event_ != nullptr) impl_.destroyEvent(event_, index_);
  }
  ReadyEvent(const ReadyEvent&) = delete;
  ReadyEvent& operator=(const ReadyEvent&) = delete;
  void* native() const { return event_; }

 private:
  c10::impl::VirtualGuardImpl impl_;
  c10::DeviceIndex index_;
  void* event_ = nullptr;
};

// What the core reads and writes for `t`: contiguous host memory (t itself when it
// already is), described by a view that still names t's device for validation; or, for a
// CUDA tensor on the device path, contiguous device memory (`host` is then on the GPU)
// and an event recorded on the current stream after the work that produces it.
struct Staged {
  torch::Tensor host;
  TensorView view;
  std::shared_ptr<ReadyEvent> ready;  // device path: the view's ready_event
};

// Whether `t` goes to kolo as it is (a CUDA tensor, a kolo with a device path, and an op
// the device path runs) rather than through host memory.
bool as_is(const torch::Tensor& t, bool device_op) {
  return device_op && t.is_cuda() && has_device_path();
}

Staged stage(const torch::Tensor& t, const std::string& name, bool device_op = false) {
  Staged s;
  const std::string which = "tensor '" + (name.empty() ? std::string("(unnamed)") : name) + "'";
  try {
    s.view.dtype = to_kolo_dtype(t.scalar_type());
  } catch (const Error& e) {
    throw Error(e.code(), which + ": " + e.what());
  }
  if (t.layout() != torch::kStrided) {
    throw Error(
        ErrorCode::kInvalidArgument,
        which + " is sparse; kolo's collectives take dense tensors (call to_dense() first)");
  }
  const bool device = as_is(t, device_op);
  s.host = t.is_cuda() && !device ? t.to(torch::kCPU) : t;
  s.host = s.host.contiguous();
  s.view.data = s.host.data_ptr();
  s.view.shape = t.sizes().vec();
  s.view.device = t.is_cuda() ? DeviceKind::kCUDA : DeviceKind::kCPU;
  s.view.device_index = t.is_cuda() ? t.device().index() : 0;
  s.view.host_staged = t.is_cuda() && !device;
  if (device) {
    // kolo's stream reads the tensor after what the current stream enqueued so far.
    s.ready = std::make_shared<ReadyEvent>(t.device());
    s.view.ready_event = s.ready->native();
  }
  return s;
}

// The current stream of `device` waits for kolo's device work of `h` (c10d's Work::wait()
// for NCCL: no host wait); nothing for host memory.
void order_after(const Handle& h, const torch::Device& device) {
  void* event = h.device_event();
  if (event == nullptr || !device.is_cuda()) return;
  c10::impl::VirtualGuardImpl impl(device.type());
  impl.block(event, impl.getStream(device));
}

TensorView view_into(torch::Tensor& host, const Staged& like) {
  TensorView v = like.view;
  v.data = host.data_ptr();
  return v;
}

// A result that kolo's device path writes into a tensor the adapter allocates on the
// input's GPU (OutputAllocator): set on kolo's background thread, read after completion.
struct DeviceResult {
  torch::Tensor tensor;
};

OutputAllocator allocate_on(const torch::Device& device, std::shared_ptr<DeviceResult> result) {
  return [device, result](DataType dtype, const std::vector<std::int64_t>& shape) {
    result->tensor =
        torch::empty(shape, torch::TensorOptions().dtype(to_torch_dtype(dtype)).device(device));
    TensorView v;
    v.data = result->tensor.data_ptr();
    v.dtype = dtype;
    v.shape = shape;
    v.device = DeviceKind::kCUDA;
    v.device_index = device.index();
    return v;
  };
}

// The device result of `h` for the caller: its current stream waits for kolo's work, and
// the caching allocator learns that the stream uses the memory (it was allocated on
// kolo's background thread), so that freeing it waits for that use.
torch::Tensor device_result(const Handle& h, const torch::Tensor& t) {
  order_after(h, t.device());
  c10::impl::VirtualGuardImpl impl(t.device().type());
  impl.recordDataPtrOnStream(t.storage().data_ptr(), impl.getStream(t.device()));
  return t;
}

// A torch tensor over a kolo result, without copying: the tensor owns the kolo Tensor.
torch::Tensor from_kolo(Tensor&& t, const torch::Device& device) {
  auto owner = std::make_shared<Tensor>(std::move(t));
  auto options = torch::TensorOptions().dtype(to_torch_dtype(owner->dtype()));
  torch::Tensor out = owner->nbytes() == 0
                          ? torch::empty(owner->shape(), options)
                          : torch::from_blob(
                                owner->data(), owner->shape(), [owner](void*) {}, options);
  return device.is_cpu() ? out : out.to(device);
}

// The result of a completed submit_for_result() for the caller, on `device`.
torch::Tensor result_of(Handle& h, const DeviceResult& result, const torch::Device& device) {
  if (result.tensor.defined()) return device_result(h, result.tensor);
  return from_kolo(std::move(h.mutable_output()), device);
}

template <typename... T>
std::shared_ptr<void> hold(T... tensors) {
  return std::make_shared<std::tuple<T...>>(std::move(tensors)...);
}

// An op whose result is new memory (allgather, alltoall, reducescatter), submitted by
// `submit(view, options)`: on the device path (the input has a ready event) the result goes
// into a tensor allocated on the input's GPU, else kolo makes it on the host (result_of).
struct Submitted {
  Handle handle;
  std::shared_ptr<DeviceResult> result;
};

template <typename Options, typename Submit>
Submitted submit_for_result(const torch::Tensor& tensor, Options o, Submit submit) {
  Staged in = stage(tensor, o.name, true);
  auto result = std::make_shared<DeviceResult>();
  if (in.ready) o.output = allocate_on(tensor.device(), result);
  Handle h = submit(in.view, o);
  h.keep_alive(hold(in.host, in.ready, result));
  return {h, result};
}

}  // namespace

DataType to_kolo_dtype(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat:
      return DataType::kFloat32;
    case torch::kDouble:
      return DataType::kFloat64;
    case torch::kHalf:
      return DataType::kFloat16;
    case torch::kBFloat16:
      return DataType::kBFloat16;
    case torch::kChar:
      return DataType::kInt8;
    case torch::kByte:
      return DataType::kUInt8;
    case torch::kInt:
      return DataType::kInt32;
    case torch::kLong:
      return DataType::kInt64;
    case torch::kBool:
      return DataType::kBool;
    default:
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("torch dtype ") + c10::toString(type) +
                      " is not supported by kolo (float32/64, float16, bfloat16, int8, uint8, "
                      "int32, int64, bool are)");
  }
}

torch::ScalarType to_torch_dtype(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return torch::kFloat;
    case DataType::kFloat64:
      return torch::kDouble;
    case DataType::kFloat16:
      return torch::kHalf;
    case DataType::kBFloat16:
      return torch::kBFloat16;
    case DataType::kInt8:
      return torch::kChar;
    case DataType::kUInt8:
      return torch::kByte;
    case DataType::kInt32:
      return torch::kInt;
    case DataType::kInt64:
      return torch::kLong;
    case DataType::kBool:
      return torch::kBool;
  }
  return torch::kFloat;
}

namespace {

// cuda:<index>, made the current device through c10's device-guard registry (no CUDA
// headers needed: this builds on CPU-only libtorch).
torch::Device current_cuda(int index) {
  torch::Device d(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(d);
  return d;
}

}  // namespace

torch::Device device() {
  if (!torch::cuda::is_available()) return torch::Device(torch::kCPU);
  return current_cuda(local_rank() % static_cast<int>(torch::cuda::device_count()));
}

torch::Device device(const std::string& choice) {
  if (choice == "auto") return device();
  if (choice == "cpu") return torch::Device(torch::kCPU);
  const std::string who = "device '" + choice + "' on rank " + std::to_string(rank());
  const bool any = choice == "cuda";
  if (!any && choice.rfind("cuda:", 0) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                who + ": expected auto, cpu, cuda (cuda:<local rank>) or cuda:<index>");
  }
  const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (count == 0) {
    throw Error(ErrorCode::kInvalidArgument,
                who +
                    ": this process sees no CUDA device (a CPU-only libtorch, no GPU, or "
                    "CUDA_VISIBLE_DEVICES empty); use cpu, or auto to take a GPU when one "
                    "is there");
  }
  int index = local_rank() % count;
  if (!any) {
    const std::string digits = choice.substr(5);
    const bool number = !digits.empty() && digits.size() <= 4 &&
                        digits.find_first_not_of("0123456789") == std::string::npos;
    index = number ? std::stoi(digits) : -1;
    if (index < 0 || index >= count) {
      throw Error(
          ErrorCode::kInvalidArgument,
          who + ": this process sees " + std::to_string(count) + " CUDA device" +
              (count == 1 ? " (cuda:0)" : "s (cuda:0 to cuda:" + std::to_string(count - 1) + ")"));
    }
  }
  return current_cuda(index);
}

torch::Tensor TorchHandle::wait() {
  if (!state_) return {};
  if (!state_->finished) {
    handle_.wait();
    state_->result = state_->finish();
    state_->finished = true;
    state_->finish = nullptr;  // releases what it held
  }
  return state_->result;
}

// --- raw (non-differentiable) operations -----------------------------------------------

TorchHandle allreduce_async(const torch::Tensor& tensor, const AllreduceOptions& options) {
  Staged in = stage(tensor, options.name, true);
  torch::Tensor out = torch::empty_like(in.host);
  Handle h = allreduce_async(in.view, view_into(out, in), options);
  h.keep_alive(hold(in.host, out, in.ready));
  return TorchHandle(h, [h, out, device = tensor.device()] {
    order_after(h, device);
    return out.to(device);
  });
}

TorchHandle allreduce_async_(torch::Tensor& tensor, const AllreduceOptions& options) {
  Staged s = stage(tensor, options.name, true);
  torch::autograd::impl::bump_version(tensor);  // an in-place write, as far as autograd knows
  Handle h = allreduce_async(s.view, s.view, options);
  h.keep_alive(hold(s.host, s.ready));
  return TorchHandle(h, [h, host = s.host, tensor]() mutable {
    torch::NoGradGuard no_grad;
    order_after(h, tensor.device());
    if (!host.is_same(tensor)) tensor.copy_(host);
    return tensor;
  });
}

TorchHandle allgather_async(const torch::Tensor& tensor, const AllgatherOptions& options) {
  auto [h, result] = submit_for_result(
      tensor, options,
      [](const TensorView& v, const AllgatherOptions& o) { return allgather_async(v, o); });
  return TorchHandle(h, [h = h, result = result, device = tensor.device()]() mutable {
    return result_of(h, *result, device);
  });
}

TorchHandle broadcast_async_(torch::Tensor& tensor, const BroadcastOptions& options) {
  Staged s = stage(tensor, options.name, true);
  torch::autograd::impl::bump_version(tensor);  // an in-place write, as far as autograd knows
  Handle h = broadcast_async(s.view, options);
  h.keep_alive(hold(s.host, s.ready));
  return TorchHandle(h, [h, host = s.host, tensor]() mutable {
    torch::NoGradGuard no_grad;
    order_after(h, tensor.device());
    if (!host.is_same(tensor)) tensor.copy_(host);
    return tensor;
  });
}

void allreduce_(torch::Tensor& tensor, const AllreduceOptions& options) {
  torch::NoGradGuard no_grad;
  allreduce_async_(tensor, options).wait();
}

void broadcast_(torch::Tensor& tensor, const BroadcastOptions& options) {
  torch::NoGradGuard no_grad;
  broadcast_async_(tensor, options).wait();
}

namespace {

std::vector<torch::Tensor> grouped_allreduce_raw(const std::vector<torch::Tensor>& tensors,
                                                 const AllreduceOptions& options) {
  std::vector<Staged> ins;
  std::vector<torch::Tensor> outs;
  std::vector<TensorView> in_views, out_views;
  for (const auto& t : tensors) {
    ins.push_back(stage(t, options.name, true));
    outs.push_back(torch::empty_like(ins.back().host));
    in_views.push_back(ins.back().view);
    out_views.push_back(view_into(outs.back(), ins.back()));
  }
  // The staged tensors and events live here until the wait, the device path holds them
  // (with the handle's state) until its work has run.
  Handle h = grouped_allreduce_async(in_views, out_views, options);
  std::vector<std::shared_ptr<ReadyEvent>> events;
  for (const Staged& s : ins) events.push_back(s.ready);
  h.keep_alive(hold(ins, outs, events));
  h.wait();
  for (std::size_t i = 0; i < outs.size(); ++i) {
    order_after(h, tensors[i].device());
    outs[i] = outs[i].to(tensors[i].device());
  }
  return outs;
}

}  // namespace

TorchAlltoallResult alltoall(const torch::Tensor& tensor, const AlltoallOptions& options) {
  auto [h, result] = submit_for_result(
      tensor, options,
      [](const TensorView& v, const AlltoallOptions& o) { return alltoall_async(v, o); });
  h.wait();
  torch::Tensor out = result_of(h, *result, tensor.device());
  return {out, h.received_splits()};
}

torch::Tensor reducescatter(const torch::Tensor& tensor, const ReducescatterOptions& options) {
  auto [h, result] = submit_for_result(
      tensor, options,
      [](const TensorView& v, const ReducescatterOptions& o) { return reducescatter_async(v, o); });
  h.wait();
  return result_of(h, *result, tensor.device());
}

// --- differentiable operations ----------------------------------------------------------

namespace {

std::string grad_name(const std::string& name) { return name.empty() ? "" : name + ".grad"; }

AllreduceOptions allreduce_options(AutogradContext* ctx) {
  AllreduceOptions o;
  o.op = static_cast<ReduceOp>(ctx->saved_data["op"].toInt());
  o.prescale_factor = ctx->saved_data["pre"].toDouble();
  o.postscale_factor = ctx->saved_data["post"].toDouble();
  o.compression = static_cast<Compression>(ctx->saved_data["compression"].toInt());
  o.name = grad_name(ctx->saved_data["name"].toStringRef());
  o.process_set = static_cast<int>(ctx->saved_data["set"].toInt());
  return o;
}

// Saves the forward's options for backward (as IValue-compatible fields) and returns them.
AllreduceOptions save_allreduce_options(AutogradContext* ctx, int64_t op, double pre, double post,
                                        int64_t compression, const std::string& name, int64_t set) {
  ctx->saved_data["op"] = op;
  ctx->saved_data["set"] = set;
  ctx->saved_data["pre"] = pre;
  ctx->saved_data["post"] = post;
  ctx->saved_data["compression"] = compression;
  ctx->saved_data["name"] = name;
  AllreduceOptions o = allreduce_options(ctx);
  o.name = name;
  return o;
}

struct AllreduceFn : torch::autograd::Function<AllreduceFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& t, int64_t op, double pre,
                               double post, int64_t compression, const std::string& name,
                               int64_t set) {
    const AllreduceOptions o = save_allreduce_options(ctx, op, pre, post, compression, name, set);
    return allreduce_async(t, o).wait();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // d/dx_r of sum_k L_k(post * reduce(pre * x)) is the same reduction of the gradients,
    // over the same process set.
    return {allreduce(grads[0], allreduce_options(ctx)), {}, {}, {}, {}, {}, {}};
  }
};

struct GroupedAllreduceFn : torch::autograd::Function<GroupedAllreduceFn> {
  // A TensorList (not a vector): that is how autograd sees each tensor as an input.
  static variable_list forward(AutogradContext* ctx, at::TensorList tensors, int64_t op, double pre,
                               double post, int64_t compression, const std::string& name,
                               int64_t set) {
    const AllreduceOptions o = save_allreduce_options(ctx, op, pre, post, compression, name, set);
    return grouped_allreduce_raw(tensors.vec(), o);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // (autograd passes zeros for outputs that did not reach the loss, so every rank
    // submits the same group)
    variable_list out = grouped_allreduce_raw(grads, allreduce_options(ctx));
    for (int i = 0; i < 6; ++i) out.emplace_back();
    return out;
  }
};

struct AllgatherFn : torch::autograd::Function<AllgatherFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& t,
                               const std::string& name, int64_t set) {
    ctx->saved_data["rows"] = t.dim() > 0 ? t.size(0) : int64_t{1};
    ctx->saved_data["name"] = name;
    ctx->saved_data["set"] = set;
    AllgatherOptions o;
    o.name = name;
    o.process_set = static_cast<int>(set);
    return allgather_async(t, o).wait();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::string name = ctx->saved_data["name"].toStringRef();
    const int set = static_cast<int>(ctx->saved_data["set"].toInt());
    AllreduceOptions avg;
    avg.name = grad_name(name);
    avg.process_set = set;
    torch::Tensor g = allreduce(grads[0], avg);
    const int64_t rows = ctx->saved_data["rows"].toInt();
    AllgatherOptions go;
    go.name = name.empty() ? "" : name + ".grad.rows";
    go.process_set = set;
    torch::Tensor all_rows = allgather(torch::tensor({rows}, torch::kLong), go);
    // The rows arrive in the order of the set's ranks.
    const int me = set == kGlobalProcessSet ? kolo::rank() : kolo::process_set(set).rank();
    const int64_t offset = all_rows.narrow(0, 0, me).sum().item<int64_t>();
    return {g.narrow(0, offset, rows), {}, {}};
  }
};

struct BroadcastFn : torch::autograd::Function<BroadcastFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& t, int64_t root,
                               const std::string& name, int64_t set) {
    ctx->saved_data["root"] = root;
    ctx->saved_data["name"] = name;
    ctx->saved_data["set"] = set;
    torch::Tensor out = t.clone();
    BroadcastOptions o;
    o.root = static_cast<int>(root);
    o.name = name;
    o.process_set = static_cast<int>(set);
    broadcast_async_(out, o).wait();
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    AllreduceOptions avg;
    avg.name = grad_name(ctx->saved_data["name"].toStringRef());
    avg.process_set = static_cast<int>(ctx->saved_data["set"].toInt());
    torch::Tensor g = allreduce(grads[0], avg);
    // The root is a rank of the job, also inside a process set.
    if (kolo::rank() != ctx->saved_data["root"].toInt()) g = torch::zeros_like(g);
    return {g, {}, {}, {}};
  }
};

bool differentiable(const torch::Tensor& t) {
  return t.requires_grad() && torch::GradMode::is_enabled();
}

}  // namespace

torch::Tensor allreduce(const torch::Tensor& tensor, const AllreduceOptions& o) {
  if (differentiable(tensor)) {
    return AllreduceFn::apply(tensor, static_cast<int64_t>(o.op), o.prescale_factor,
                              o.postscale_factor, static_cast<int64_t>(o.compression), o.name,
                              static_cast<int64_t>(o.process_set));
  }
  return allreduce_async(tensor, o).wait();
}

std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& tensors,
                                             const AllreduceOptions& o) {
  for (const auto& t : tensors) {
    if (differentiable(t)) {
      return GroupedAllreduceFn::apply(at::TensorList(tensors), static_cast<int64_t>(o.op),
                                       o.prescale_factor, o.postscale_factor,
                                       static_cast<int64_t>(o.compression), o.name,
                                       static_cast<int64_t>(o.process_set));
    }
  }
  return grouped_allreduce_raw(tensors, o);
}

torch::Tensor allgather(const torch::Tensor& tensor, const AllgatherOptions& o) {
  if (differentiable(tensor)) {
    return AllgatherFn::apply(tensor, o.name, static_cast<int64_t>(o.process_set));
  }
  return allgather_async(tensor, o).wait();
}

torch::Tensor broadcast(const torch::Tensor& tensor, const BroadcastOptions& o) {
  if (differentiable(tensor)) {
    return BroadcastFn::apply(tensor, static_cast<int64_t>(o.root), o.name,
                              static_cast<int64_t>(o.process_set));
  }
  torch::Tensor out = tensor.clone();
  broadcast_async_(out, o).wait();
  return out;
}

}  // namespace kolo
