#include "core/request_builder.h"

#include <algorithm>

#include "common/convert.h"

namespace kolo::core {

namespace {

// What an error is about ("allreduce 'w' input 2"): the text is built only for an error
// (a submit that succeeds builds no string: it is on every operation's path).
struct Subject {
  const char* kind;  // "allreduce", "grouped allreduce", op_name(op)
  const std::string& name;
  const char* part = nullptr;  // "input", "output", "tensor"
  int index = -1;              // of the part; -1: none
  Subject of(const char* p, int i = -1) const { return {kind, name, p, i}; }
  std::string str() const {
    std::string s = std::string(kind) + " '" + name + "'";
    if (part != nullptr) s += std::string(" ") + part;
    if (index >= 0) s += " " + std::to_string(index);
    return s;
  }
};

Status check_view(const TensorView& v, const Subject& what) {
  // Every dimension, not only the product: {-2, -3} has 6 "elements".
  std::int64_t elements = 1;
  for (std::int64_t d : v.shape) {
    if (d < 0) {
      return InvalidArgument(what.str() + " has a negative dimension " + shape_string(v.shape));
    }
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(elements, d, &elements) ||
        __builtin_mul_overflow(elements, static_cast<std::int64_t>(dtype_size(v.dtype)), &bytes)) {
      return InvalidArgument(what.str() + " has shape " + shape_string(v.shape) +
                             ": its size in bytes does not fit in 64 bits");
    }
  }
  if (v.data == nullptr && v.numel() > 0) {
    return InvalidArgument(what.str() + " has " + std::to_string(v.numel()) +
                           " elements but a null data pointer");
  }
  return Status::OK();
}

// Whether the set exists and this rank is in it is the runtime's check (Runtime::submit).
Status check_process_set(int id, const Subject& what) {
  if (id < 0) {
    return InvalidArgument(what.str() + ": process set " + std::to_string(id) +
                           " does not exist (ids are 0, the global set, and those "
                           "kolo::add_process_set returned)");
  }
  return Status::OK();
}

// The request of an operation on one tensor.
Status single(OpType op, const std::string& name, const TensorView& t, int process_set,
              Request* out) {
  const Subject what{op_name(op), name};
  KOLO_RETURN_IF_ERROR(check_process_set(process_set, what));
  KOLO_RETURN_IF_ERROR(check_view(t, what.of("tensor")));
  Request r;
  r.process_set = process_set;
  r.op = op;
  r.name = name;
  r.dtype = t.dtype;
  r.wire_dtype = t.dtype;
  r.device = t.device;
  r.shapes = {t.shape};
  *out = std::move(r);
  return Status::OK();
}

}  // namespace

Status allreduce_request(const std::vector<TensorView>& inputs,
                         const std::vector<TensorView>& outputs, const AllreduceOptions& o,
                         bool grouped, const std::string& name, Request* out) {
  Request r;
  r.op = OpType::kAllreduce;
  r.name = name;
  const Subject what{grouped ? "grouped allreduce" : "allreduce", r.name};
  KOLO_RETURN_IF_ERROR(check_process_set(o.process_set, what));
  r.process_set = o.process_set;
  r.shapes.reserve(inputs.size());
  if (inputs.empty() || inputs.size() != outputs.size()) {
    return InvalidArgument(what.str() + ": got " + std::to_string(inputs.size()) + " inputs and " +
                           std::to_string(outputs.size()) +
                           " outputs; pass one output per input (at least one)");
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorView& in = inputs[i];
    const TensorView& output = outputs[i];
    KOLO_RETURN_IF_ERROR(check_view(in, what.of("input", static_cast<int>(i))));
    KOLO_RETURN_IF_ERROR(check_view(output, what.of("output", static_cast<int>(i))));
    if (in.dtype != inputs[0].dtype || in.device != inputs[0].device) {
      // Horovod fuses mixed dtypes in one group; here a group is one request with one
      // dtype, so a mixed group is split by the caller.
      return InvalidArgument(
          what.str() + ": tensor " + std::to_string(i) + " is " + dtype_name(in.dtype) + " on " +
          device_kind_name(in.device) + " but tensor 0 is " + dtype_name(inputs[0].dtype) + " on " +
          device_kind_name(inputs[0].device) +
          "; every tensor of a group must have one dtype and device: make one group "
          "per dtype (they still fuse with each other's dtype-mates)");
    }
    if (output.dtype != in.dtype || output.numel() != in.numel() || output.device != in.device) {
      return InvalidArgument(what.str() + ": output " + std::string(dtype_name(output.dtype)) +
                             shape_string(output.shape) + " does not match input " +
                             dtype_name(in.dtype) + shape_string(in.shape) +
                             "; they need the same dtype, device and number of elements");
    }
    r.shapes.push_back(in.shape);
  }
  r.dtype = inputs[0].dtype;
  r.device = inputs[0].device;
  r.reduce_op = o.op;
  r.prescale = o.prescale_factor;
  r.postscale = o.postscale_factor;
  r.wire_dtype = wire_dtype(r.dtype, o.compression);
  *out = std::move(r);
  return Status::OK();
}

Status allgather_request(const TensorView& input, const AllgatherOptions& o,
                         const std::string& name, Request* out) {
  return single(OpType::kAllgather, name, input, o.process_set, out);
}

Status broadcast_request(const TensorView& tensor, const BroadcastOptions& o,
                         const std::string& name, Request* out) {
  KOLO_RETURN_IF_ERROR(single(OpType::kBroadcast, name, tensor, o.process_set, out));
  out->root = o.root;
  return Status::OK();
}

Status alltoall_request(const TensorView& input, const AlltoallOptions& o, const std::string& name,
                        Request* out) {
  KOLO_RETURN_IF_ERROR(single(OpType::kAlltoall, name, input, o.process_set, out));
  out->splits = o.splits;
  return Status::OK();
}

Status reducescatter_request(const TensorView& input, const ReducescatterOptions& o,
                             const std::string& name, Request* out) {
  KOLO_RETURN_IF_ERROR(single(OpType::kReducescatter, name, input, o.process_set, out));
  out->reduce_op = o.op;
  out->prescale = o.prescale_factor;
  out->postscale = o.postscale_factor;
  return Status::OK();
}

Status barrier_request(const BarrierOptions& o, Request* out) {
  TensorView none;
  none.shape = {0};
  const std::string name = o.process_set == kGlobalProcessSet
                               ? "barrier"
                               : "barrier.set" + std::to_string(o.process_set);
  KOLO_RETURN_IF_ERROR(single(OpType::kBarrier, name, none, o.process_set, out));
  out->shapes.clear();
  return Status::OK();
}

Request join_request() {
  Request r;
  r.op = OpType::kJoin;
  r.name = "join";
  return r;
}

Request add_process_set_request(std::vector<int> ranks, const std::string& name) {
  std::sort(ranks.begin(), ranks.end());
  Request r;
  r.op = OpType::kAddProcessSet;
  r.name = name;
  r.process_set = kGlobalProcessSet;
  r.splits.assign(ranks.begin(), ranks.end());
  return r;
}

Request remove_process_set_request(int id, const std::string& name) {
  Request r;
  r.op = OpType::kRemoveProcessSet;
  r.name = name;
  r.process_set = kGlobalProcessSet;
  r.root = id;
  return r;
}

}  // namespace kolo::core
