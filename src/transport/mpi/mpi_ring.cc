// The MPI transport's ring allreduce over point-to-point messages, used instead of
// MPI_Iallreduce for large buffers on communicators that ask for it (the hierarchical
// transport's cross-host communicators; see split_mpi_communicator).
//
// Why: OpenMPI's nonblocking MPI_Iallreduce (libnbc) is much slower on large buffers than
// its blocking one: at 2 ranks each side sends and reduces the whole buffer. The ring
// sends 2 (n-1)/n of the buffer per rank and reduces (n-1)/n of it, and every step is a
// pair of nonblocking messages polled against the deadline like everything else here.
//
// Algorithm (n ranks, the buffer cut into n chunks c = 0..n-1 of about count/n elements):
//   reduce-scatter, steps s = 0..n-2: send chunk (r - s) to the right neighbour, receive
//     chunk (r - s - 1) from the left one into scratch and fold it into the buffer; after
//     the last step rank r holds the final value of chunk (r + 1);
//   allgather, steps s = 0..n-2: send chunk (r + 1 - s) right, receive chunk (r - s) from
//     the left straight into the buffer.
// Each chunk's result is computed once and copied, so every rank gets the same bits.
// Buffers over kRingPiece bytes go round in pieces (MPI counts are int).
//
// Not for: small buffers (MPI_Iallreduce's latency is lower), or the control plane.
#include <algorithm>

#include "common/reduce.h"
#include "transport/mpi/mpi_internal.h"

namespace kolo::transport::mpi {
namespace {

constexpr int kTagRing = 32101;  // see mpi_control.cc for the control plane's tags
constexpr std::size_t kRingPiece = std::size_t{1} << 30;

}  // namespace

Status MpiCommunicator::ring_allreduce(char* data, std::size_t count, DataType dtype, ReduceOp op,
                                       Clock::time_point start, Deadline deadline) {
  const int n = size(), me = rank();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const std::size_t es = dtype_size(dtype);
  const std::size_t piece = std::max<std::size_t>(kRingPiece / es, 1);
  auto describe = [&] {
    return where("allreduce") + " (" + std::to_string(count) + " " + dtype_name(dtype) +
           " elements, " + reduce_op_name(op) + ", ring of " + std::to_string(n) +
           " ranks, receiving from " + std::to_string(left) + ", sending to " +
           std::to_string(right) + ")";
  };
  MPI_Request requests[2];
  for (std::size_t off = 0; off < count; off += piece) {
    const std::size_t m = std::min(piece, count - off);
    char* buf = data + off * es;
    auto lo = [&](int c) { return m * static_cast<std::size_t>(c) / n; };
    auto elems = [&](int c) { return lo(c + 1) - lo(c); };
    const std::size_t most = (m + n - 1) / n;  // elements of the largest chunk
    if (scratch_.size() < most * es) scratch_.resize(most * es);
    // One step: receive chunk `in` from the left into `into`, send chunk `out` right.
    auto step = [&](int out, int in, char* into) {
      int rc = MPI_Irecv(into, static_cast<int>(elems(in) * es), MPI_BYTE, left, kTagRing, comm_,
                         &requests[0]);
      if (rc != MPI_SUCCESS) return fail_mpi(describe(), rc);
      rc = MPI_Isend(buf + lo(out) * es, static_cast<int>(elems(out) * es), MPI_BYTE, right,
                     kTagRing, comm_, &requests[1]);
      if (rc != MPI_SUCCESS) return fail_mpi(describe(), rc);
      return complete(requests, 2, start, deadline, describe);
    };
    for (int s = 0; s < n - 1; ++s) {
      const int out = (me - s + n) % n, in = (me - s - 1 + 2 * n) % n;
      KOLO_RETURN_IF_ERROR(step(out, in, scratch_.data()));
      reduce_into(buf + lo(in) * es, scratch_.data(), elems(in), dtype, op);
    }
    for (int s = 0; s < n - 1; ++s) {
      const int out = (me + 1 - s + n) % n, in = (me - s + n) % n;
      KOLO_RETURN_IF_ERROR(step(out, in, buf + lo(in) * es));
    }
  }
  return Status::OK();
}

}  // namespace kolo::transport::mpi
