#include "core/ops.h"

#include "core/request_builder.h"

namespace kolo::core::ops {

namespace {

// `name`, or the runtime's default name (kept in *made): no copy of a name the user gave.
const std::string& name_or_default(Runtime& runtime, const std::string& name, OpType op,
                                   int process_set, std::string* made) {
  if (!name.empty()) return name;
  *made = runtime.default_name(op, process_set);
  return *made;
}

Handle submit(Runtime& runtime, const Status& built, Request request,
              std::vector<TensorView> inputs, std::vector<TensorView> outputs,
              OutputAllocator allocate_output = {}) {
  built.throw_if_error();
  Handle handle;
  runtime
      .submit(std::move(request), std::move(inputs), std::move(outputs), &handle,
              std::move(allocate_output))
      .throw_if_error();
  return handle;
}

}  // namespace

Handle allreduce(Runtime& runtime, std::vector<TensorView> inputs, std::vector<TensorView> outputs,
                 const AllreduceOptions& o, bool grouped) {
  Request r;
  std::string made;
  const Status s = allreduce_request(
      inputs, outputs, o, grouped,
      name_or_default(runtime, o.name, OpType::kAllreduce, o.process_set, &made), &r);
  return submit(runtime, s, std::move(r), std::move(inputs), std::move(outputs));
}

Handle allgather(Runtime& runtime, const TensorView& input, const AllgatherOptions& o) {
  Request r;
  std::string made;
  const Status s = allgather_request(
      input, o, name_or_default(runtime, o.name, OpType::kAllgather, o.process_set, &made), &r);
  return submit(runtime, s, std::move(r), {input}, {}, o.output);
}

Handle broadcast(Runtime& runtime, const TensorView& tensor, const BroadcastOptions& o) {
  Request r;
  std::string made;
  const Status s = broadcast_request(
      tensor, o, name_or_default(runtime, o.name, OpType::kBroadcast, o.process_set, &made), &r);
  return submit(runtime, s, std::move(r), {tensor}, {tensor});
}

Handle alltoall(Runtime& runtime, const TensorView& input, const AlltoallOptions& o) {
  Request r;
  std::string made;
  const Status s = alltoall_request(
      input, o, name_or_default(runtime, o.name, OpType::kAlltoall, o.process_set, &made), &r);
  return submit(runtime, s, std::move(r), {input}, {}, o.output);
}

Handle reducescatter(Runtime& runtime, const TensorView& input, const ReducescatterOptions& o) {
  Request r;
  std::string made;
  const Status s = reducescatter_request(
      input, o, name_or_default(runtime, o.name, OpType::kReducescatter, o.process_set, &made), &r);
  return submit(runtime, s, std::move(r), {input}, {}, o.output);
}

Handle barrier(Runtime& runtime, const BarrierOptions& o) {
  Request r;
  const Status s = barrier_request(o, &r);
  return submit(runtime, s, std::move(r), {}, {});
}

Handle join(Runtime& runtime) { return submit(runtime, Status::OK(), join_request(), {}, {}); }

ProcessSet add_process_set(Runtime& runtime, std::vector<int> ranks) {
  ProcessSet set;
  runtime.add_process_set(std::move(ranks), &set).throw_if_error();
  return set;
}

void remove_process_set(Runtime& runtime, const ProcessSet& set) {
  runtime.remove_process_set(set.id()).throw_if_error();
}

ProcessSet global_process_set(Runtime& runtime) { return process_set(runtime, kGlobalProcessSet); }

ProcessSet process_set(Runtime& runtime, int id) {
  ProcessSet set;
  runtime.process_set(id, &set).throw_if_error();
  return set;
}

}  // namespace kolo::core::ops
