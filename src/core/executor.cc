#include "core/executor.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "common/convert.h"
#include "common/reduce.h"
#include "common/shape.h"
#include "core/fusion.h"
#include "core/negotiation.h"

namespace kolo::core {
namespace {

using transport::Deadline;

// Averaging divides the sum by the number of ranks (joined ranks included).
double average_divisor(const Response& r, int size) {
  return r.reduce_op == ReduceOp::kAverage ? size : 1.0;
}

void finish_scaling(void* buf, std::size_t count, const Response& r, int size) {
  const double divisor = average_divisor(r, size);
  if (r.postscale != 1.0 || divisor != 1.0) scale(buf, count, r.dtype, r.postscale, divisor);
}

Status run_allreduce(transport::Communicator& comm, const Response& r, Entry* entry,
                     Deadline deadline, ExecTimes* times) {
  for (std::size_t i = 0; i < r.shapes.size(); ++i) {
    const auto count = static_cast<std::size_t>(shape_numel(r.shapes[i]));
    Tensor zeros;
    void* buf;
    if (entry) {
      const TensorView& in = entry->inputs[i];
      const TensorView& out = entry->outputs[i];
      buf = out.data;
      // Copy to the output and prescale in one pass.
      scale_into(out.data, in.data, count, r.dtype, r.prescale);
    } else {
      // A joined rank: the op's identity (zeros for sums), so the others' result is theirs.
      zeros = Tensor(r.dtype, r.shapes[i]);
      fill_identity(zeros.data(), count, r.dtype, r.reduce_op);
      buf = zeros.data();
    }
    // A grouped allreduce runs tensor by tensor: its phases span the first tensor's
    // communication to the last one's.
    if (i == 0) times->comm_start = ExecTimes::Clock::now();
    KOLO_RETURN_IF_ERROR(comm.allreduce(buf, count, r.dtype, wire_op(r.reduce_op), deadline));
    times->comm_end = ExecTimes::Clock::now();
    finish_scaling(buf, count, r, comm.size());
  }
  return Status::OK();
}

Status run_allgather(transport::Communicator& comm, const Response& r, Entry& entry,
                     Deadline deadline) {
  const ExchangeLayout l = exchange_layout(r, entry, comm.size(), comm.rank());
  auto& out = entry.handle->output;
  out = Tensor(r.dtype, l.out_shape);
  return comm.allgatherv(entry.inputs[0].data, out.data(), l.recv, deadline);
}

// MPI moves alltoall data with int byte counts and displacements. The response holds
// every rank's splits, so each rank checks every rank's layout and all fail together,
// instead of the one whose layout is too large failing alone while the others wait in
// the exchange until their deadline.
Status check_alltoall_layouts(const Response& r, int size, std::size_t rb) {
  constexpr auto kMax = static_cast<std::size_t>(INT_MAX);
  for (int i = 0; i < size; ++i) {
    for (const bool sends : {true, false}) {
      std::size_t offset = 0;
      for (int j = 0; j < size; ++j) {
        const auto rows = static_cast<std::size_t>(sends ? r.splits[std::size_t(i) * size + j]
                                                         : r.splits[std::size_t(j) * size + i]);
        std::size_t bytes = 0;
        if (__builtin_mul_overflow(rows, rb, &bytes) || bytes > kMax || offset > kMax) {
          return InvalidArgument(
              "alltoall '" + r.name + "': rank " + std::to_string(i) +
              (sends ? " sends " : " receives ") + std::to_string(rows) + " rows (" +
              std::to_string(bytes) + " bytes) " + (sends ? "to" : "from") + " rank " +
              std::to_string(j) + " after " + std::to_string(offset) +
              " bytes for lower ranks; kolo's alltoall moves at most " + std::to_string(kMax) +
              " bytes per rank pair and before the last rank (MPI's int counts and "
              "displacements): split the exchange into several alltoalls");
        }
        offset += bytes;
      }
    }
  }
  return Status::OK();
}

Status run_alltoall(transport::Communicator& comm, const Response& r, Entry& entry,
                    Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_alltoall_layouts(r, comm.size(), row_bytes(r.shapes[0], r.dtype)));
  const ExchangeLayout l = exchange_layout(r, entry, comm.size(), comm.rank());
  auto& out = entry.handle->output;
  out = Tensor(r.dtype, l.out_shape);
  return comm.alltoallv(entry.inputs[0].data, l.send, out.data(), l.recv, deadline);
}

Status run_reducescatter(transport::Communicator& comm, const Response& r, Entry& entry,
                         Deadline deadline) {
  const int size = comm.size();
  const Shape& shape = r.shapes[0];
  const std::size_t row_elems = row_bytes(shape, r.dtype) / dtype_size(r.dtype);
  std::vector<std::size_t> counts(size);
  for (int j = 0; j < size; ++j) {
    counts[j] = static_cast<std::size_t>(reducescatter_rows(shape[0], size, j)) * row_elems;
  }
  const void* send = entry.inputs[0].data;
  Tensor scaled;  // never scale the caller's input in place
  if (r.prescale != 1.0) {
    scaled = Tensor(r.dtype, shape);
    std::memcpy(scaled.data(), send, scaled.nbytes());
    scale(scaled.data(), static_cast<std::size_t>(shape_numel(shape)), r.dtype, r.prescale);
    send = scaled.data();
  }
  Shape out_shape = shape;
  out_shape[0] = reducescatter_rows(shape[0], size, comm.rank());
  auto& out = entry.handle->output;
  out = Tensor(r.dtype, out_shape);
  KOLO_RETURN_IF_ERROR(
      comm.reducescatter(send, out.data(), counts, r.dtype, wire_op(r.reduce_op), deadline));
  finish_scaling(out.data(), counts[comm.rank()], r, size);
  return Status::OK();
}

bool host_memory(const Response& r, const Entry* entry) {
  return !entry || r.device == DeviceKind::kCPU ||
         std::all_of(entry->inputs.begin(), entry->inputs.end(),
                     [](const TensorView& v) { return v.host_staged; });
}

Status device_memory_error(const Response& r) {
  return Status(ErrorCode::kUnsupported,
                std::string(op_name(r.op)) + " '" + r.name +
                    "': the core runtime only reads and writes CPU memory; pass CUDA tensors "
                    "through the libtorch adapter (kolo/torch.h), which stages them on the host");
}

// The per-op part of execute_response (defined below, next to it).
Status dispatch(transport::Communicator& comm, const Response& r, Entry* entry, Deadline deadline,
                ExecTimes* times);

}  // namespace

ExchangeLayout exchange_layout(const Response& r, Entry& entry, int size, int me) {
  const std::size_t rb = row_bytes(r.shapes[0], r.dtype);
  ExchangeLayout l;
  l.send.assign(size, 0);
  l.recv.assign(size, 0);
  l.out_shape = r.op == OpType::kAlltoall ? entry.inputs[0].shape : r.shapes[0];
  l.out_shape[0] = 0;
  if (r.op == OpType::kAllgather) {
    for (int j = 0; j < size; ++j) {
      l.recv[j] = static_cast<std::size_t>(r.first_dims[j]) * rb;
      l.out_shape[0] += r.first_dims[j];
    }
    return l;
  }
  auto& received = entry.handle->received_splits;
  received.assign(size, 0);
  for (int j = 0; j < size; ++j) {
    const std::int64_t to_j = r.splits[std::size_t(me) * size + j];
    const std::int64_t from_j = r.splits[std::size_t(j) * size + me];
    l.send[j] = static_cast<std::size_t>(to_j) * rb;
    l.recv[j] = static_cast<std::size_t>(from_j) * rb;
    received[j] = from_j;
    l.out_shape[0] += from_j;
  }
  return l;
}

void* FusionBuffer::get(transport::Communicator& comm, std::size_t bytes) {
  if (void* shared = comm.fusion_buffer(bytes)) return shared;
  if (own_.size() < bytes) {
    own_.clear();
    own_.shrink_to_fit();
    own_.resize(bytes);
  }
  return own_.data();
}

namespace {

// The pieces of a gather/scatter allreduce of `items` (Communicator::allreduce_pieces), or
// false when they must be packed instead: a rank that joined or cannot read its memory
// contributes the op's identity, a compressed wire dtype needs converting, and tensors that share
// memory (other than a tensor's own input and output) would see each other's results.
bool gather_pieces(const std::vector<FusedItem>& items, int size,
                   std::vector<transport::AllreducePiece>* pieces) {
  pieces->clear();
  for (const auto& item : items) {
    const Response& r = *item.response;
    if (!item.entry || !host_memory(r, item.entry) || r.wire_dtype != r.dtype) return false;
    for (std::size_t i = 0; i < r.shapes.size(); ++i) {
      const TensorView& in = item.entry->inputs[i];
      const TensorView& out = item.entry->outputs[i];
      const auto count = static_cast<std::size_t>(shape_numel(r.shapes[i]));
      if (count == 0) continue;
      pieces->push_back({.in = in.data,
                         .out = out.data,
                         .count = count,
                         .prescale = r.prescale,
                         .postscale = r.postscale,
                         .divisor = average_divisor(r, size)});
    }
  }
  // A lone tensor reduced in place shares memory with nothing (most lone allreduces).
  if (pieces->size() == 1 && pieces->front().in == pieces->front().out) return true;
  // Every item has the same dtype (a fusion group's wire dtype, uncompressed).
  const std::size_t es = dtype_size(items.front().response->dtype);
  std::vector<std::pair<const char*, const char*>> ranges;  // [begin, end) of every buffer
  ranges.reserve(2 * pieces->size());
  for (const auto& p : *pieces) {
    const auto* i0 = static_cast<const char*>(p.in);
    const auto* o0 = static_cast<const char*>(p.out);
    const std::size_t bytes = p.count * es;
    ranges.emplace_back(o0, o0 + bytes);
    if (i0 != o0) ranges.emplace_back(i0, i0 + bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t k = 1; k < ranges.size(); ++k) {
    if (ranges[k].first < ranges[k - 1].second) return false;
  }
  return true;
}

}  // namespace

bool allreduce_pieces_of(const std::vector<FusedItem>& items, int size,
                         std::vector<transport::AllreducePiece>* pieces) {
  return gather_pieces(items, size, pieces);
}

Status execute_fused(transport::Communicator& comm, const std::vector<FusedItem>& items,
                     FusionBuffer& buffer, Deadline deadline, std::vector<Status>* item_status,
                     ExecTimes* times) {
  ExecTimes local;
  if (!times) times = &local;
  times->pack_start = ExecTimes::Clock::now();
  const Response& first = *items.front().response;
  item_status->assign(items.size(), Status::OK());
  std::vector<transport::AllreducePiece>& pieces = buffer.pieces();
  if (comm.reduces_pieces() && gather_pieces(items, comm.size(), &pieces)) {
    // No packing: the transport reads the inputs and writes the outputs itself, scaling
    // as it goes.
    times->comm_start = ExecTimes::Clock::now();
    KOLO_RETURN_IF_ERROR(
        comm.allreduce_pieces(pieces, first.dtype, wire_op(first.reduce_op), deadline));
    times->comm_end = times->unpack_end = ExecTimes::Clock::now();
    return Status::OK();
  }
  // An entry this rank cannot read (device memory not staged on the host) fails alone;
  // it still takes part (with the op's identity) so the other ranks' collective completes.
  std::vector<Entry*> entries(items.size());
  for (std::size_t k = 0; k < items.size(); ++k) {
    entries[k] = items[k].entry;
    if (entries[k] && !host_memory(*items[k].response, entries[k])) {
      (*item_status)[k] = device_memory_error(*items[k].response);
      entries[k] = nullptr;
    }
  }
  const DataType wire = first.wire_dtype;
  const std::size_t elem = dtype_size(wire);
  std::size_t total = 0;
  for (const auto& item : items) {
    for (const auto& shape : item.response->shapes)
      total += static_cast<std::size_t>(shape_numel(shape));
  }
  auto* base = static_cast<std::byte*>(buffer.get(comm, total * elem));

  std::size_t offset = 0;  // elements
  for (std::size_t k = 0; k < items.size(); ++k) {
    const Response& r = *items[k].response;
    for (std::size_t i = 0; i < r.shapes.size(); ++i) {
      const auto count = static_cast<std::size_t>(shape_numel(r.shapes[i]));
      std::byte* dst = base + offset * elem;
      if (entries[k]) {
        // Copy (or compress) and prescale in one pass.
        convert_scaled(entries[k]->inputs[i].data, r.dtype, dst, wire, count, r.prescale);
      } else {
        fill_identity(dst, count, wire, r.reduce_op);  // a joined rank: op's identity
      }
      offset += count;
    }
  }

  times->comm_start = ExecTimes::Clock::now();
  KOLO_RETURN_IF_ERROR(comm.allreduce(base, total, wire, wire_op(first.reduce_op), deadline));
  times->comm_end = ExecTimes::Clock::now();

  offset = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const Response& r = *items[k].response;
    for (std::size_t i = 0; i < r.shapes.size(); ++i) {
      const auto count = static_cast<std::size_t>(shape_numel(r.shapes[i]));
      std::byte* src = base + offset * elem;
      if (entries[k] && count) {
        // Average and postscale while copying (or decompressing) out.
        convert_scaled(src, wire, entries[k]->outputs[i].data, r.dtype, count, r.postscale,
                       average_divisor(r, comm.size()));
      }
      offset += count;
    }
  }
  times->unpack_end = ExecTimes::Clock::now();
  return Status::OK();
}

Status execute_response(transport::Communicator& comm, const Response& r, Entry* entry,
                        Deadline deadline, ExecTimes* times) {
  ExecTimes local;
  if (!times) times = &local;
  times->pack_start = times->comm_start = times->comm_end = ExecTimes::Clock::now();
  Status s = dispatch(comm, r, entry, deadline, times);
  times->unpack_end = ExecTimes::Clock::now();
  if (r.op != OpType::kAllreduce) times->comm_end = times->unpack_end;
  return s;
}

namespace {

Status dispatch(transport::Communicator& comm, const Response& r, Entry* entry, Deadline deadline,
                ExecTimes* times) {
  if (!host_memory(r, entry) && r.op != OpType::kBarrier && r.op != OpType::kJoin) {
    return device_memory_error(r);
  }
  if (!entry && r.op != OpType::kAllreduce && r.op != OpType::kBarrier && r.op != OpType::kJoin) {
    return Internal(std::string(op_name(r.op)) + " '" + r.name +
                    "' reached a rank that did not submit it");
  }
  switch (r.op) {
    case OpType::kAllreduce:
      return run_allreduce(comm, r, entry, deadline, times);
    case OpType::kAllgather:
      return run_allgather(comm, r, *entry, deadline);
    case OpType::kBroadcast:
      return comm.broadcast(entry->outputs[0].data, entry->outputs[0].nbytes(), r.root, deadline);
    case OpType::kAlltoall:
      return run_alltoall(comm, r, *entry, deadline);
    case OpType::kReducescatter:
      return run_reducescatter(comm, r, *entry, deadline);
    case OpType::kBarrier:
      return comm.barrier(deadline);
    case OpType::kJoin:
      if (entry) entry->handle->last_joined_rank = r.last_joined;
      return Status::OK();
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
      return Internal(std::string(op_name(r.op)) + " '" + r.name +
                      "' reached the executor; the runtime applies process-set changes itself");
  }
  return Internal("unknown operation in response");
}

}  // namespace

}  // namespace kolo::core
