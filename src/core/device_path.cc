#include "core/device_path.h"

#include <algorithm>

#include "common/deadline.h"

#include "common/reduce.h"
#include "common/shape.h"
#include "core/executor.h"
#include "core/fusion.h"
#include "core/negotiation.h"

namespace kolo::core {

namespace {

Status staged_on_device_path(const Response& r) {
  return InvalidArgument(std::string(op_name(r.op)) + " '" + r.name +
                         "': this rank passed a CUDA tensor staged in host memory where the job "
                         "runs CUDA tensors on the device path (NCCL); pass the device tensor "
                         "itself, as the libtorch adapter does when kolo has a device");
}

// The host wait for running groups when the path ends (the runtime is ending).
constexpr double kEndWaitSeconds = 10;

}  // namespace

bool runs_on_device(const Response& r) {
  if (r.device != DeviceKind::kCUDA) return false;
  switch (r.op) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
    case OpType::kAllgather:
    case OpType::kAlltoall:
    case OpType::kReducescatter:
      return true;
    default:
      return false;
  }
}

DevicePath::~DevicePath() {
  // The stream may still read or write the fusion buffer and the callers' memory.
  if (!drain(deadline_after(kEndWaitSeconds)).ok()) abort();
  stream_.reset();  // the stand-in's thread ends here, its waits bounded
  if (buffer_ != nullptr) dev_.release(buffer_);
}

Status DevicePath::usable(const Entry& entry, const Response& r) const {
  for (const TensorView& v : entry.inputs) {
    if (v.host_staged) return staged_on_device_path(r);
    if (v.device_index != index_) {
      return InvalidArgument(
          std::string(op_name(r.op)) + " '" + r.name +
          "': its tensor is on cuda:" + std::to_string(v.device_index) +
          ", but this rank's device path runs on cuda:" + std::to_string(index_) +
          " (kolo uses one GPU per process, the one of its first device tensor: "
          "pin each process to one GPU, as kolo::device() does)");
    }
  }
  return Status::OK();
}

Status DevicePath::wait_ready(const Entry& entry) {
  for (const TensorView& v : entry.inputs) {
    if (v.ready_event != nullptr)
      KOLO_RETURN_IF_ERROR(dev_.wait_native_event(*stream_, v.ready_event));
  }
  return Status::OK();
}

Status DevicePath::ready(transport::Communicator& control, transport::Deadline deadline) {
  if (!stream_) KOLO_RETURN_IF_ERROR(dev_.create_stream(&stream_));
  if (!comm_)
    KOLO_RETURN_IF_ERROR(device::connect_collectives(dev_, control, deadline, &comm_, options_));
  return comm_->async_error();
}

Status DevicePath::reserve(std::size_t bytes, transport::Deadline deadline) {
  if (bytes <= capacity_) return Status::OK();
  // Running groups still use the old buffer (rare: the buffer only grows).
  KOLO_RETURN_IF_ERROR(drain(deadline));
  if (buffer_ != nullptr) dev_.release(buffer_);
  buffer_ = nullptr;
  capacity_ = 0;
  KOLO_RETURN_IF_ERROR(dev_.allocate(bytes, &buffer_));
  capacity_ = bytes;
  return Status::OK();
}

void DevicePath::abort() {
  if (comm_) {
    comm_->abort();
    comm_.reset();
  }
}

Status DevicePath::poll() {
  while (!running_.empty()) {
    Running& front = running_.front();
    bool done = false;
    Status s = dev_.query(*front.done, &done);
    if (s.ok() && !done && transport::Clock::now() >= front.deadline) {
      s = PeerFailure("the device work of " + front.what + " on " + dev_.name() +
                      " did not finish within the peer timeout: a peer does not take part, or "
                      "the GPU is stuck");
    }
    if (s.ok() && comm_) s = comm_->async_error();
    if (!s.ok()) {
      abort();
      return s;
    }
    if (!done) return Status::OK();
    running_.pop_front();  // releases the callers' memory
  }
  return comm_ ? comm_->async_error() : Status::OK();
}

Status DevicePath::drain(transport::Deadline deadline) {
  while (!running_.empty()) {
    KOLO_RETURN_IF_ERROR(dev_.synchronize(*running_.front().done, deadline));
    running_.pop_front();
  }
  return Status::OK();
}

Status DevicePath::execute(transport::Communicator& control, const std::vector<FusedItem>& items,
                           transport::Deadline deadline, std::vector<Status>* item_status,
                           ExecTimes* times, std::shared_ptr<device::Event>* done) {
  item_status->assign(items.size(), Status::OK());
  times->pack_start = ExecTimes::Clock::now();
  Status s = poll();  // an earlier group's failure ends the runtime before more is enqueued
  if (s.ok()) s = ready(control, deadline);
  if (!s.ok()) {
    abort();
    return s;
  }
  const Response& first = *items.front().response;
  Running run;
  run.deadline = deadline;
  run.what = std::string(op_name(first.op)) + " '" + first.name + "'" +
             (items.size() > 1 ? " and " + std::to_string(items.size() - 1) + " more" : "");
  for (const FusedItem& item : items) {
    if (item.entry) run.held.push_back(item.entry->handle);
  }
  if (first.op == OpType::kAllreduce) {
    s = allreduce(items, deadline, item_status, times, &run.held);
  } else {
    // One response: a broadcast, allgather, alltoall or reducescatter.
    times->comm_start = ExecTimes::Clock::now();
    const FusedItem& item = items.front();
    if (!item.entry) {
      s = Internal(std::string(op_name(first.op)) + " '" + first.name +
                   "' reached a rank that did not submit it");
    } else if (first.op == OpType::kBroadcast) {
      s = broadcast(first, *item.entry);
    } else {
      s = resized(first, *item.entry, deadline, &(*item_status)[0]);
    }
    if (!s.ok()) (*item_status)[0] = s;
  }
  // Whatever was enqueued is marked, and held until it has run.
  std::unique_ptr<device::Event> event;
  Status marked = dev_.create_event(&event);
  if (marked.ok()) marked = dev_.record(*event, *stream_);
  if (!marked.ok()) {
    abort();  // work may be enqueued that nothing marks: the communicator cannot go on
    const Status drained = drain(deadline);
    return drained.ok() ? marked : drained;
  }
  run.done = std::move(event);
  *done = run.done;
  running_.push_back(std::move(run));
  // A handle that fails completes at once, but this rank's part may still read its memory
  // (it took part so that the others' collective completes): wait for that first (a rare
  // path), so that the caller may free its memory once the handle completed.
  const bool failed = !s.ok() || std::any_of(item_status->begin(), item_status->end(),
                                             [](const Status& st) { return !st.ok(); });
  if (failed) {
    const Status drained = drain(deadline);
    if (!drained.ok()) {
      abort();
      return drained;
    }
  }
  times->comm_end = times->unpack_end = ExecTimes::Clock::now();
  return s;
}

Status DevicePath::broadcast(const Response& r, Entry& entry) {
  KOLO_RETURN_IF_ERROR(usable(entry, r));
  KOLO_RETURN_IF_ERROR(wait_ready(entry));
  const TensorView& out = entry.outputs[0];
  return comm_->broadcast(out.data, out.data, out.nbytes(), r.root, *stream_);
}

Status DevicePath::output_of(Entry& entry, const Response& r, const Shape& shape, std::size_t bytes,
                             void** out) const {
  const std::string what = std::string(op_name(r.op)) + " '" + r.name + "'";
  if (!entry.allocate_output) {
    return InvalidArgument(what +
                           ": its input is device memory, so kolo needs the caller's output "
                           "allocator (the options' `output`, kolo/types.h) to put the result "
                           "on the device; the libtorch adapter gives one");
  }
  TensorView v;
  try {
    v = entry.allocate_output(r.dtype, shape);
  } catch (const std::exception& e) {
    return InvalidArgument(what + ": the output allocator failed: " + e.what());
  }
  if (v.device != DeviceKind::kCUDA || v.host_staged || v.device_index != index_ ||
      v.nbytes() < bytes || (bytes > 0 && v.data == nullptr)) {
    return InvalidArgument(what + ": the output allocator returned " +
                           (v.data == nullptr
                                ? std::string("no memory")
                                : std::to_string(v.nbytes()) + " bytes of " +
                                      device_kind_name(v.device) +
                                      (v.host_staged ? " (host-staged)" : "") +
                                      " memory on device " + std::to_string(v.device_index)) +
                           "; it must return device memory on cuda:" + std::to_string(index_) +
                           " of " + std::to_string(bytes) + " bytes or more");
  }
  *out = v.data;
  return Status::OK();
}

Status DevicePath::resized(const Response& r, Entry& entry, transport::Deadline deadline,
                           Status* mine) {
  KOLO_RETURN_IF_ERROR(usable(entry, r));
  const int size = comm_->size();
  const int me = comm_->rank();
  const std::size_t elem = dtype_size(r.dtype);
  const std::size_t rb = row_bytes(r.shapes[0], r.dtype);
  // The result's shape and bytes, and the fusion buffer's part in the op.
  ExchangeLayout l;
  std::size_t scratch = 0;  // reducescatter: size padded blocks and one result block
  std::size_t block = 0;    // reducescatter: the largest rank's elements
  if (r.op != OpType::kReducescatter) {
    l = exchange_layout(r, entry, size, me);
  } else {
    // NCCL's reducescatter takes equal blocks: rank j's rows are packed (with prescale)
    // into block j of the fusion buffer, padded to the largest block.
    block = static_cast<std::size_t>(reducescatter_rows(r.shapes[0][0], size, 0)) * rb / elem;
    scratch = (static_cast<std::size_t>(size) + 1) * block * elem;
    l.out_shape = r.shapes[0];
    l.out_shape[0] = reducescatter_rows(r.shapes[0][0], size, me);
  }
  const Shape& out_shape = l.out_shape;
  const std::size_t out_bytes = static_cast<std::size_t>(shape_numel(out_shape)) * elem;
  void* out = nullptr;
  *mine = output_of(entry, r, out_shape, out_bytes, &out);
  // Without a place for its result this rank still takes part (into the fusion buffer),
  // so that the others' collective completes; its own handle fails.
  KOLO_RETURN_IF_ERROR(reserve(std::max(scratch, mine->ok() ? 0 : out_bytes), deadline));
  if (!mine->ok()) out = buffer_;
  KOLO_RETURN_IF_ERROR(wait_ready(entry));
  const void* in = entry.inputs[0].data;
  if (r.op == OpType::kAllgather) return comm_->allgatherv(in, out, l.recv, *stream_);
  if (r.op == OpType::kAlltoall) return comm_->alltoallv(in, l.send, out, l.recv, *stream_);
  auto* base = static_cast<std::byte*>(buffer_);
  std::size_t offset = 0;  // elements of the input
  for (int j = 0; j < size; ++j) {
    const auto count =
        static_cast<std::size_t>(reducescatter_rows(r.shapes[0][0], size, j)) * rb / elem;
    if (count > 0) {
      KOLO_RETURN_IF_ERROR(dev_.convert(base + j * block * elem, r.dtype,
                                        static_cast<const std::byte*>(in) + offset * elem, r.dtype,
                                        count, r.prescale, 1.0, *stream_));
    }
    offset += count;
  }
  std::byte* result = base + static_cast<std::size_t>(size) * block * elem;
  KOLO_RETURN_IF_ERROR(
      comm_->reducescatter(base, result, block, r.dtype, wire_op(r.reduce_op), *stream_));
  const std::size_t my_count = out_bytes / elem;
  if (!mine->ok() || my_count == 0) return Status::OK();
  const double divisor = r.reduce_op == ReduceOp::kAverage ? size : 1.0;
  return dev_.convert(out, r.dtype, result, r.dtype, my_count, r.postscale, divisor, *stream_);
}

Status DevicePath::allreduce(const std::vector<FusedItem>& items, transport::Deadline deadline,
                             std::vector<Status>* item_status, ExecTimes* times,
                             std::vector<std::shared_ptr<void>>* held) {
  const Response& first = *items.front().response;
  const DataType wire = first.wire_dtype;
  const std::size_t elem = dtype_size(wire);
  // A rank that cannot take part with its memory (it joined, or passed memory this path
  // cannot read) contributes the op's identity, so that the others' collective completes.
  std::vector<Entry*> entries(items.size());
  std::size_t total = 0, most = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    entries[k] = items[k].entry;
    if (entries[k]) {
      Status why = usable(*entries[k], *items[k].response);
      if (!why.ok()) {
        (*item_status)[k] = std::move(why);
        entries[k] = nullptr;
      }
    }
    for (const auto& shape : items[k].response->shapes) {
      const auto count = static_cast<std::size_t>(shape_numel(shape));
      total += count;
      if (!entries[k]) most = std::max(most, count);
    }
  }
  // The device's error names it and the size.
  KOLO_RETURN_IF_ERROR(reserve(total * elem, deadline));
  auto* base = static_cast<std::byte*>(buffer_);
  // The identity is copied from the host when the stream gets there: its memory is held
  // with the group.
  std::shared_ptr<std::vector<unsigned char>> identity;
  if (most > 0) {
    identity = std::make_shared<std::vector<unsigned char>>(most * elem);
    fill_identity(identity->data(), most, wire, first.reduce_op);
    held->push_back(identity);
  }
  for (Entry* entry : entries) {
    if (entry) KOLO_RETURN_IF_ERROR(wait_ready(*entry));
  }
  std::size_t offset = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const Response& r = *items[k].response;
    for (std::size_t i = 0; i < r.shapes.size(); ++i) {
      const auto count = static_cast<std::size_t>(shape_numel(r.shapes[i]));
      std::byte* dst = base + offset * elem;
      if (count > 0 && entries[k]) {
        KOLO_RETURN_IF_ERROR(dev_.convert(dst, wire, entries[k]->inputs[i].data, r.dtype, count,
                                          r.prescale, 1.0, *stream_));
      } else if (count > 0) {
        KOLO_RETURN_IF_ERROR(dev_.copy(dst, identity->data(), count * elem, *stream_));
      }
      offset += count;
    }
  }
  times->comm_start = ExecTimes::Clock::now();
  KOLO_RETURN_IF_ERROR(
      comm_->allreduce(base, base, total, wire, wire_op(first.reduce_op), *stream_));
  const int size = comm_->size();
  offset = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const Response& r = *items[k].response;
    const double divisor = r.reduce_op == ReduceOp::kAverage ? size : 1.0;
    for (std::size_t i = 0; i < r.shapes.size(); ++i) {
      const auto count = static_cast<std::size_t>(shape_numel(r.shapes[i]));
      if (count > 0 && entries[k]) {
        KOLO_RETURN_IF_ERROR(dev_.convert(entries[k]->outputs[i].data, r.dtype,
                                          base + offset * elem, wire, count, r.postscale, divisor,
                                          *stream_));
      }
      offset += count;
    }
  }
  return Status::OK();
}

}  // namespace kolo::core
