// The Gloo transport's data plane: each Communicator collective on gloo's algorithms.
//
//   allreduce      gloo::allreduce (ring over unbound buffers, 1 MiB segments) with kolo's
//                  reduce kernels as the reduce function, for every dtype and op
//                  (float16/bfloat16 included: gloo has no bfloat16, and kolo's results
//                  must be the same bits on every transport)
//   allgatherv     gloo::allgatherv on bytes
//   broadcast      gloo::broadcast on bytes
//   alltoallv      gloo::alltoallv on bytes
//   reducescatter  a ring over unbound buffers (Debian's gloo has no reduce-scatter
//                  function), with kolo's reduce kernels: see reducescatter() below
//   barrier        gloo::barrier
//
// Every call runs through guarded() (gloo_internal.h): gloo's timeout is the deadline's
// time left, every exception is caught, and a failure breaks the communicator.
//
// Not for: the control plane (gloo_control.cc).
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "common/reduce.h"
#include "transport/arg_checks.h"
#include "transport/gloo/gloo_internal.h"

namespace kolo::transport::gloo_impl {

void gloo_reduce(void* c, const void* a, const void* b, std::size_t n, DataType dtype,
                 ReduceOp op) {
  // Every op kolo has is commutative, bit for bit (IEEE addition and multiplication are),
  // so c = a op b may fold into whichever operand c already is.
  if (c == a) {
    reduce_into(c, b, n, dtype, op);
  } else if (c == b) {
    reduce_into(c, a, n, dtype, op);
  } else {
    std::memmove(c, a, n * dtype_size(dtype));
    reduce_into(c, b, n, dtype, op);
  }
}

namespace {

// gloo types buffers by their element size only; these stand for every dtype of a size.
template <typename F>
void with_element_type(std::size_t element, F&& f) {
  switch (element) {
    case 1:
      f(std::uint8_t{});
      break;
    case 2:
      f(std::uint16_t{});
      break;
    case 4:
      f(std::uint32_t{});
      break;
    default:
      f(std::uint64_t{});
      break;
  }
}

}  // namespace

Status GlooCommunicator::allreduce(void* buffer, std::size_t count, DataType dtype, ReduceOp op,
                                   Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("allreduce"));
  if (op == ReduceOp::kAverage) {
    return InvalidArgument(where("allreduce") +
                           ": average is not a transport op (the runtime sums, then scales)");
  }
  if (count == 0 || size() == 1) return Status::OK();
  if (!world_->options.library_allreduce) {
    return guarded("allreduce", deadline, [&] {
      return ring_allreduce({AllreducePiece{.in = buffer, .out = buffer, .count = count}}, dtype,
                            op, deadline);
    });
  }
  return guarded("allreduce", deadline, [&] {
    ::gloo::AllreduceOptions opts(context_);
    with_element_type(dtype_size(dtype), [&](auto type) {
      opts.setOutput(static_cast<decltype(type)*>(buffer), count);
    });
    opts.setReduceFunction([dtype, op](void* c, const void* a, const void* b, std::size_t n) {
      gloo_reduce(c, a, b, n, dtype, op);
    });
    opts.setTag(next_tag());
    opts.setTimeout(timeout(deadline));
    ::gloo::allreduce(opts);
    return Status::OK();
  });
}

// The pieces' concatenation through the ring, read from the inputs and written to the
// outputs without packing. Prescaled inputs are packed first (the ring folds the inputs as
// they are); postscale and divisor are applied to each output at the end. Same bits as
// the runtime's packing (scale_into in, allreduce, scale_into out), and the same messages
// (the ring cuts the concatenation, not the pieces), so ranks may mix both in one call.
Status GlooCommunicator::allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype,
                                          ReduceOp op, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("allreduce"));
  if (op == ReduceOp::kAverage) {
    return InvalidArgument(where("allreduce") +
                           ": average is not a transport op (the runtime sums, then scales)");
  }
  std::size_t total = 0;
  bool prescaled = false;
  for (const auto& p : pieces) {
    total += p.count;
    prescaled = prescaled || (p.count > 0 && p.prescale != 1.0);
  }
  const std::size_t es = dtype_size(dtype);
  Status s = Status::OK();
  if (prescaled || (size() > 1 && world_->options.library_allreduce)) {
    packed_.resize(total * es);
    char* at = packed_.data();
    for (const auto& p : pieces) {
      scale_into(at, p.in, p.count, dtype, p.prescale);
      at += p.count * es;
    }
    s = allreduce(packed_.data(), total, dtype, op, deadline);
    if (!s.ok()) return s;
    at = packed_.data();
    for (const auto& p : pieces) {
      scale_into(p.out, at, p.count, dtype, p.postscale, p.divisor);
      at += p.count * es;
    }
    return s;
  }
  if (size() == 1) {
    for (const auto& p : pieces) {
      if (p.out != p.in) std::memmove(p.out, p.in, p.count * es);
    }
  } else if (total > 0) {
    s = guarded("allreduce", deadline, [&] { return ring_allreduce(pieces, dtype, op, deadline); });
    if (!s.ok()) return s;
  }
  for (const auto& p : pieces) {
    if (p.postscale != 1.0 || p.divisor != 1.0)
      scale(p.out, p.count, dtype, p.postscale, p.divisor);
  }
  return s;
}

Status GlooCommunicator::allgatherv(const void* send, void* recv,
                                    const std::vector<std::size_t>& recv_bytes, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("allgatherv"));
  if (recv_bytes.size() != static_cast<std::size_t>(size())) {
    return InvalidArgument(where("allgatherv") + ": recv_bytes has " +
                           std::to_string(recv_bytes.size()) + " entries, expected one per rank");
  }
  std::size_t total = 0;
  for (std::size_t r = 0; r < recv_bytes.size(); ++r) {
    // The same per-rank bound as the MPI transport, so jobs behave the same on both.
    if (recv_bytes[r] > static_cast<std::size_t>(INT_MAX)) {
      return InvalidArgument(where("allgatherv") + ": recv_bytes[" + std::to_string(r) + "] is " +
                             std::to_string(recv_bytes[r]) + " bytes; at most " +
                             std::to_string(INT_MAX) + " bytes per rank (split the tensor)");
    }
    total += recv_bytes[r];
  }
  // recv_bytes is the same on every rank, so every rank skips an empty gather together.
  if (total == 0) return Status::OK();
  if (size() == 1) {
    std::memmove(recv, send, total);
    return Status::OK();
  }
  return guarded("allgatherv", deadline, [&] {
    ::gloo::AllgathervOptions opts(context_);
    opts.setInput(static_cast<std::uint8_t*>(const_cast<void*>(send)), recv_bytes[rank()]);
    opts.setOutput(static_cast<std::uint8_t*>(recv), recv_bytes);
    opts.setTag(next_tag());
    opts.setTimeout(timeout(deadline));
    ::gloo::allgatherv(opts);
    return Status::OK();
  });
}

Status GlooCommunicator::broadcast(void* buffer, std::size_t bytes, int root, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("broadcast"));
  if (root < 0 || root >= size()) {
    return InvalidArgument(where("broadcast") + ": root " + std::to_string(root) +
                           " is not a rank (0.." + std::to_string(size() - 1) + ")");
  }
  if (bytes == 0 || size() == 1) return Status::OK();
  return guarded("broadcast", deadline, [&] {
    ::gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<std::uint8_t*>(buffer), bytes);
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(timeout(deadline));
    ::gloo::broadcast(opts);
    return Status::OK();
  });
}

Status GlooCommunicator::alltoallv(const void* send, const std::vector<std::size_t>& send_bytes,
                                   void* recv, const std::vector<std::size_t>& recv_bytes,
                                   Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("alltoallv"));
  KOLO_RETURN_IF_ERROR(check_alltoallv_counts(where("alltoallv"), size(), send_bytes, recv_bytes));
  if (size() == 1) {
    if (send_bytes[0] != recv_bytes[0]) {
      return InvalidArgument(where("alltoallv") + ": sends " + std::to_string(send_bytes[0]) +
                             " bytes to itself but expects " + std::to_string(recv_bytes[0]));
    }
    std::memmove(recv, send, send_bytes[0]);
    return Status::OK();
  }
  std::vector<std::int64_t> out(send_bytes.begin(), send_bytes.end());
  std::vector<std::int64_t> in(recv_bytes.begin(), recv_bytes.end());
  // gloo wants non-null buffers even where nothing moves.
  std::uint8_t dummy[1];
  auto* sendp = send != nullptr ? static_cast<std::uint8_t*>(const_cast<void*>(send)) : dummy;
  auto* recvp = recv != nullptr ? static_cast<std::uint8_t*>(recv) : dummy;
  return guarded("alltoallv", deadline, [&] {
    ::gloo::AlltoallvOptions opts(context_);
    opts.setInput(sendp, out);
    opts.setOutput(recvp, in);
    opts.setTag(next_tag());
    opts.setTimeout(timeout(deadline));
    ::gloo::alltoallv(opts);
    return Status::OK();
  });
}

Status GlooCommunicator::reducescatter(const void* send, void* recv,
                                       const std::vector<std::size_t>& counts, DataType dtype,
                                       ReduceOp op, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("reducescatter"));
  if (op == ReduceOp::kAverage) {
    return InvalidArgument(where("reducescatter") +
                           ": average is not a transport op (the runtime sums, then scales)");
  }
  if (counts.size() != static_cast<std::size_t>(size())) {
    return InvalidArgument(where("reducescatter") + ": counts has " +
                           std::to_string(counts.size()) + " entries, expected one per rank");
  }
  std::size_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > static_cast<std::size_t>(INT_MAX)) {
      return InvalidArgument(where("reducescatter") + ": counts[" + std::to_string(r) + "] is " +
                             std::to_string(counts[r]) + " elements; at most " +
                             std::to_string(INT_MAX) + " per rank (split the tensor)");
    }
    total += counts[r];
  }
  if (total == 0) return Status::OK();  // counts are the same on every rank
  const std::size_t element = dtype_size(dtype);
  if (size() == 1) {
    std::memmove(recv, send, total * element);
    return Status::OK();
  }
  return guarded("reducescatter", deadline,
                 [&] { return ring_reducescatter(send, recv, counts, dtype, op, deadline); });
}

// The ring: n - 1 steps. In step s, rank r sends its partial result of block
// (r - s - 1) mod n to rank r + 1 and receives rank r - 1's partial of block
// (r - s - 2) mod n, which it folds its own contribution into. A partial thus travels
// the ring gathering one contribution per hop, and after the last step rank r holds the
// whole result of block r (received from r - 1 with n - 1 contributions, plus its own).
// Step 0 sends straight from `send`; later steps send the block received (and reduced)
// in the step before, from one of two scratch halves that take turns, so a send is
// complete before its half receives again. Each rank sends and receives (n - 1) / n of
// the input once (an allreduce moves twice that). Empty blocks are skipped by
// both neighbours alike (every rank has the same counts). `recv` is written only at the
// end, after the last read of `send` but the own block's (a memmove), so it may alias
// `send`. Each step is one slot; every wait is bounded by the deadline.
Status GlooCommunicator::ring_reducescatter(const void* send, void* recv,
                                            const std::vector<std::size_t>& counts, DataType dtype,
                                            ReduceOp op, Deadline deadline) {
  const int n = size(), me = rank();
  const std::size_t element = dtype_size(dtype);
  std::vector<std::size_t> offset(counts.size() + 1, 0);  // in bytes
  std::size_t largest = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    offset[r + 1] = offset[r] + counts[r] * element;
    largest = std::max(largest, counts[r] * element);
  }
  auto bytes_of = [&](int block) { return counts[block] * element; };
  auto* input = static_cast<char*>(const_cast<void*>(send));
  scratch_.resize(2 * largest);
  auto in = context_->createUnboundBuffer(input, offset[n]);
  std::unique_ptr<::gloo::transport::UnboundBuffer> half[2] = {
      context_->createUnboundBuffer(scratch_.data(), largest),
      context_->createUnboundBuffer(scratch_.data() + largest, largest)};
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const std::uint64_t slot = next_slot(n - 1);
  for (int s = 0; s < n - 1; ++s) {
    const int out_block = ((me - s - 1) % n + n) % n;
    const int in_block = ((me - s - 2) % n + n) % n;
    ::gloo::transport::UnboundBuffer* out = nullptr;
    if (bytes_of(out_block) > 0) {
      out = s == 0 ? in.get() : half[(s + 1) % 2].get();
      out->send(right, slot + s, s == 0 ? offset[out_block] : 0, bytes_of(out_block));
    }
    ::gloo::transport::UnboundBuffer* got = half[s % 2].get();
    bool done = true;
    if (bytes_of(in_block) > 0) {
      got->recv(left, slot + s, 0, bytes_of(in_block));
      done = wait_data(got, false, deadline);
    }
    if (done && out != nullptr) done = wait_data(out, true, deadline);
    if (!done) return PeerFailure("step " + std::to_string(s) + " of the ring was aborted");
    if (bytes_of(in_block) == 0) continue;
    const char* own = input + offset[in_block];
    if (s == n - 2) {  // in_block is this rank's: the result
      gloo_reduce(recv, own, got->ptr, counts[in_block], dtype, op);
    } else {
      reduce_into(got->ptr, own, counts[in_block], dtype, op);
    }
  }
  return Status::OK();
}

Status GlooCommunicator::barrier(Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("barrier"));
  if (size() == 1) return Status::OK();
  return guarded("barrier", deadline, [&] {
    ::gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag());
    opts.setTimeout(timeout(deadline));
    ::gloo::barrier(opts);
    return Status::OK();
  });
}

}  // namespace kolo::transport::gloo_impl
