#include "core/device_path.h"

#include <algorithm>

#include "common/reduce.h"
#include "common/shape.h"
#include "core/fusion.h"

namespace kolo::core {

namespace {

bool device_memory(const Entry& e) {
  return std::none_of(e.inputs.begin(), e.inputs.end(),
                      [](const TensorView& v) { return v.host_staged; });
}

Status staged_on_device_path(const Response& r) {
  return InvalidArgument(std::string(op_name(r.op)) + " '" + r.name +
                         "': this rank passed a CUDA tensor staged in host memory where the job "
                         "runs CUDA tensors on the device path (NCCL); pass the device tensor "
                         "itself, as the libtorch adapter does when kolo has a device");
}

}  // namespace

bool runs_on_device(const Response& r) {
  return r.device == DeviceKind::kCUDA &&
         (r.op == OpType::kAllreduce || r.op == OpType::kBroadcast);
}

DevicePath::~DevicePath() {
  if (buffer_ != nullptr) dev_.release(buffer_);
}

Status DevicePath::ready(transport::Communicator& control, transport::Deadline deadline) {
  if (!stream_) KOLO_RETURN_IF_ERROR(dev_.create_stream(&stream_));
  if (!done_) KOLO_RETURN_IF_ERROR(dev_.create_event(&done_));
  if (!comm_) KOLO_RETURN_IF_ERROR(device::connect_collectives(dev_, control, deadline, &comm_));
  return comm_->async_error();
}

Status DevicePath::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return Status::OK();
  if (buffer_ != nullptr) dev_.release(buffer_);
  buffer_ = nullptr;
  capacity_ = 0;
  KOLO_RETURN_IF_ERROR(dev_.allocate(bytes, &buffer_));
  capacity_ = bytes;
  return Status::OK();
}

Status DevicePath::finish(transport::Deadline deadline) {
  KOLO_RETURN_IF_ERROR(dev_.record(*done_, *stream_));
  Status s = dev_.synchronize(*done_, deadline);
  if (s.ok()) s = comm_->async_error();
  // A collective that failed or did not finish leaves the device communicator unusable
  // (NCCL's rule): abort it, so that nothing of it waits on, and make a new one next time.
  if (!s.ok()) {
    comm_->abort();
    comm_.reset();
  }
  return s;
}

Status DevicePath::execute(transport::Communicator& control, const std::vector<FusedItem>& items,
                           transport::Deadline deadline, std::vector<Status>* item_status,
                           ExecTimes* times) {
  item_status->assign(items.size(), Status::OK());
  times->pack_start = ExecTimes::Clock::now();
  KOLO_RETURN_IF_ERROR(ready(control, deadline));
  const Response& first = *items.front().response;
  Status s;
  if (first.op == OpType::kBroadcast) {
    times->comm_start = ExecTimes::Clock::now();
    s = broadcast(items.front());
    if (!s.ok()) (*item_status)[0] = s;
  } else {
    s = allreduce(items, item_status, times);
  }
  // Whatever was enqueued runs to its end before the buffers are reused or the handles
  // complete.
  const Status done = finish(deadline);
  times->comm_end = times->unpack_end = ExecTimes::Clock::now();
  return done.ok() ? s : done;
}

Status DevicePath::broadcast(const FusedItem& item) {
  const Response& r = *item.response;
  if (!item.entry)
    return Internal("broadcast '" + r.name + "' reached a rank that did not submit it");
  if (!device_memory(*item.entry)) return staged_on_device_path(r);
  const TensorView& out = item.entry->outputs[0];
  return comm_->broadcast(out.data, out.data, out.nbytes(), r.root, *stream_);
}

Status DevicePath::allreduce(const std::vector<FusedItem>& items, std::vector<Status>* item_status,
                             ExecTimes* times) {
  const Response& first = *items.front().response;
  const DataType wire = first.wire_dtype;
  const std::size_t elem = dtype_size(wire);
  // A rank that cannot take part with its memory (it joined, or passed host-staged memory)
  // contributes the op's identity, so that the others' collective completes.
  std::vector<Entry*> entries(items.size());
  std::size_t total = 0, most = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    entries[k] = items[k].entry;
    if (entries[k] && !device_memory(*entries[k])) {
      (*item_status)[k] = staged_on_device_path(*items[k].response);
      entries[k] = nullptr;
    }
    for (const auto& shape : items[k].response->shapes) {
      const auto count = static_cast<std::size_t>(shape_numel(shape));
      total += count;
      if (!entries[k]) most = std::max(most, count);
    }
  }
  KOLO_RETURN_IF_ERROR(reserve(total * elem));  // the device's error names it and the size
  auto* base = static_cast<std::byte*>(buffer_);
  if (most > 0) {
    identity_.resize(most * elem);
    fill_identity(identity_.data(), most, wire, first.reduce_op);
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
        KOLO_RETURN_IF_ERROR(dev_.copy(dst, identity_.data(), count * elem, *stream_));
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
