// The hierarchical transport's collectives.
//
// allreduce, with L ranks per host and local rank l (every host alike):
//   1. reduce-scatter in the host's shared-memory segment: after a barrier, local rank l
//      reduces slice l (about count/L elements, cut on 64-byte boundaries) over the L
//      regions: the host's result for slice l;
//   2. allreduce of slice l across hosts, in place, over the MPI communicator of the ranks
//      with local rank l (one per host): every host's local rank l moves 1/L of the data,
//      all L of them at once, so the hosts' links carry count/L per rank instead of a
//      leader's whole buffer (Horovod's hierarchical allreduce does the same);
//   3. allgather in shared memory: local rank l copies its final slice into the other
//      regions, a barrier, and every region holds the result.
// Buffers larger than a region go through region-sized chunks (the shm transport's copy
// path); fusion_buffer() is the region itself, which needs no copy at all.
//
// Everything else goes to the job's MPI communicator unchanged.
//
// Failure: each phase is bounded by the caller's deadline. A dead rank on this host is
// named within ~20-40 ms by the shm barrier; a failure in the cross phase is published in
// the segment, so this host's other ranks fail at once quoting it. A rank whose allreduce
// fails also announces it to every rank over MPI (FailureNotices); the shm barriers and
// the cross-host waits poll for notices, so ranks on other hosts fail within ~20 ms too
// instead of at their deadline (MPI alone cannot tell them a peer died).
//
// Not for: setup and selection (hier_communicator.cc).
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "common/format.h"
#include "transport/hier/hier_internal.h"
#include "transport/shm/shm_communicator.h"

namespace kolo::transport::hier {
namespace {}  // namespace

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<Communicator> global,
                                                   std::unique_ptr<FailureNotices> notices,
                                                   std::unique_ptr<Communicator> local,
                                                   std::unique_ptr<Communicator> cross,
                                                   const std::vector<int>& cross_ranks)
    : global_(std::move(global)),
      notices_(std::move(notices)),
      local_(std::move(local)),
      cross_(std::move(cross)),
      cross_names_(ranks_string(cross_ranks)) {}

HierarchicalCommunicator::~HierarchicalCommunicator() {
  if (broken_.empty()) return;  // parts are destroyed in reverse order: global_ last
  Communicator* leaked[] = {cross_.release(), local_.release(), global_.release()};
  FailureNotices* notices = notices_.release();
#if defined(__SANITIZE_ADDRESS__)
  for (Communicator* c : leaked) __lsan_ignore_object(c);
  __lsan_ignore_object(notices);
#else
  (void)leaked;
  (void)notices;
#endif
}

std::string HierarchicalCommunicator::where(const char* op) const {
  const Topology& t = topology();
  return std::string("hierarchical ") + op + " on rank " + std::to_string(t.rank) + " of " +
         std::to_string(t.size) + " (host " + std::to_string(t.cross_rank) + " of " +
         std::to_string(t.cross_size) + ", local rank " + std::to_string(t.local_rank) + " of " +
         std::to_string(t.local_size) + "): ";
}

Status HierarchicalCommunicator::check(const char* op) const {
  if (broken_.empty()) return Status::OK();
  return PeerFailure(where(op) + "the transport failed earlier: " + broken_);
}

Status HierarchicalCommunicator::record(Status s) {
  if (s.code() == ErrorCode::kPeerFailure && broken_.empty()) broken_ = s.message();
  return s;
}

Status HierarchicalCommunicator::allreduce(void* buffer, std::size_t count, DataType dtype,
                                           ReduceOp op, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("allreduce"));
  if (op == ReduceOp::kAverage) {
    return InvalidArgument(where("allreduce") +
                           "average is not a transport op (the runtime sums, then scales)");
  }
  if (count == 0) return Status::OK();
  if (!hierarchical_) return record(global_->allreduce(buffer, count, dtype, op, deadline));
  Status cross_failure;
  const SliceStage stage = [&](void* slice, std::size_t n) {
    Status s = cross_->allreduce(slice, n, dtype, op, deadline);
    if (!s.ok()) {
      cross_failure = s;
      // Interrupted by another host's notice: quote it alone (it names the cause).
      std::string notice;
      if (notices_->received(&notice)) {
        s = PeerFailure(where("allreduce") + "another host failed: " + notice);
      } else {
        s = Status(s.code(), where("allreduce") + "the cross-host allreduce with " + cross_names_ +
                                 " failed: " + s.message());
      }
    }
    return s;
  };
  Status s = shm_allreduce_staged(*local_, buffer, count, dtype, op, stage, deadline);
  if (s.ok()) return s;
  if (s.code() != ErrorCode::kPeerFailure) return s;
  if (cross_failure.ok()) {
    // Failed in this host's shared-memory phases (the message names the ranks).
    s = PeerFailure(where("allreduce") + "on this host: " + s.message());
  }
  // Tell the other hosts at once, unless this failure came from their notice: MPI would
  // make them wait for their deadline.
  if (std::string notice; !notices_->received(&notice)) notices_->announce(s.message());
  return record(std::move(s));
}

void* HierarchicalCommunicator::fusion_buffer(std::size_t bytes) {
  return broken_.empty() ? local_->fusion_buffer(bytes) : nullptr;
}

Status HierarchicalCommunicator::allgatherv(const void* send, void* recv,
                                            const std::vector<std::size_t>& recv_bytes,
                                            Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("allgatherv"));
  return record(global_->allgatherv(send, recv, recv_bytes, deadline));
}

Status HierarchicalCommunicator::broadcast(void* buffer, std::size_t bytes, int root,
                                           Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("broadcast"));
  return record(global_->broadcast(buffer, bytes, root, deadline));
}

Status HierarchicalCommunicator::alltoallv(const void* send,
                                           const std::vector<std::size_t>& send_bytes, void* recv,
                                           const std::vector<std::size_t>& recv_bytes,
                                           Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("alltoallv"));
  return record(global_->alltoallv(send, send_bytes, recv, recv_bytes, deadline));
}

Status HierarchicalCommunicator::reducescatter(const void* send, void* recv,
                                               const std::vector<std::size_t>& counts,
                                               DataType dtype, ReduceOp op, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("reducescatter"));
  return record(global_->reducescatter(send, recv, counts, dtype, op, deadline));
}

Status HierarchicalCommunicator::barrier(Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("barrier"));
  return record(global_->barrier(deadline));
}

Status HierarchicalCommunicator::control_and(std::vector<std::uint64_t>& words, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("control_and"));
  return record(global_->control_and(words, deadline));
}

Status HierarchicalCommunicator::control_gather(const std::string& mine,
                                                std::vector<std::string>* all, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("control_gather"));
  return record(global_->control_gather(mine, all, deadline));
}

Status HierarchicalCommunicator::control_broadcast(std::string* message, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("control_broadcast"));
  return record(global_->control_broadcast(message, deadline));
}

}  // namespace kolo::transport::hier
