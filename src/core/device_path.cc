#include "core/device_path.h"

#include <algorithm>

#include "common/deadline.h"

#include "common/reduce.h"
#include "common/shape.h"
#include "core/fusion.h"

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
  return r.device == DeviceKind::kCUDA &&
         (r.op == OpType::kAllreduce || r.op == OpType::kBroadcast);
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
  if (!comm_) KOLO_RETURN_IF_ERROR(device::connect_collectives(dev_, control, deadline, &comm_));
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
  if (first.op == OpType::kBroadcast) {
    times->comm_start = ExecTimes::Clock::now();
    s = broadcast(items.front());
    if (!s.ok()) (*item_status)[0] = s;
  } else {
    s = allreduce(items, deadline, item_status, times, &run.held);
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
  times->comm_end = times->unpack_end = ExecTimes::Clock::now();
  return s;
}

Status DevicePath::broadcast(const FusedItem& item) {
  const Response& r = *item.response;
  if (!item.entry)
    return Internal("broadcast '" + r.name + "' reached a rank that did not submit it");
  KOLO_RETURN_IF_ERROR(usable(*item.entry, r));
  KOLO_RETURN_IF_ERROR(wait_ready(*item.entry));
  const TensorView& out = item.entry->outputs[0];
  return comm_->broadcast(out.data, out.data, out.nbytes(), r.root, *stream_);
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
