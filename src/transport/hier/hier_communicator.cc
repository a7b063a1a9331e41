// The hierarchical transport's lifecycle: options, setup over the job's MPI communicator,
// and the transport table's selection policy.
//
// Setup (every rank, collectively over the MPI communicator):
//   1. split it into this host's ranks and the ranks with this local rank (MPI_Comm_dup of
//      the groups the MPI transport found at start-up, so KOLO_TEST_HOSTS applies);
//   2. wrap the host's communicator in the shm transport (its own bootstrap: one segment
//      per host, created by the host's first rank and unlinked at once);
//   3. a control_and over the whole job of "my host's segment works": every rank decides
//      the same way even when only one host could not create its segment;
//   4. the failure-notice channel (a duplicate of the MPI communicator), which the shm
//      barriers and the cross-host waits poll.
//
// Not for: the collectives themselves (hier_collectives.cc).
#include <utility>
#include <vector>

#include "common/logging.h"
#include "transport/hier/hier_communicator.h"
#include "transport/hier/hier_internal.h"

namespace kolo::transport {
namespace {

Deadline after_seconds(double seconds) { return deadline_after(seconds); }

// Whether every host has the same number of ranks (collective over `comm`).
Status same_local_size(Communicator& comm, Deadline deadline, bool* same) {
  const std::int32_t l = comm.topology().local_size;
  std::int32_t v[2] = {l, -l};  // min of both: the smallest and the largest local size
  KOLO_RETURN_IF_ERROR(comm.allreduce(v, 2, DataType::kInt32, ReduceOp::kMin, deadline));
  *same = v[0] == -v[1];
  return Status::OK();
}

}  // namespace

Status wrap_in_hierarchical(std::unique_ptr<Communicator>& comm, const HierOptions& options) {
  Communicator& world = *comm;
  std::unique_ptr<Communicator> local, cross;
  std::vector<int> local_ranks, cross_ranks;
  KOLO_RETURN_IF_ERROR(world.split_by_host(HostGroup::kHost, &local, &local_ranks));
  KOLO_RETURN_IF_ERROR(world.split_by_host(HostGroup::kCross, &cross, &cross_ranks));
  const Status mine = wrap_in_shm(local, options.shm, &local_ranks);
  if (mine.code() == ErrorCode::kPeerFailure) return mine;
  if (!mine.ok()) {
    KOLO_LOG(kWarning, "hier") << "rank " << world.rank() << ": " << mine.message();
  }
  std::vector<std::uint64_t> ok = {mine.ok() ? 1u : 0u};
  KOLO_RETURN_IF_ERROR(world.control_and(ok, after_seconds(options.shm.bootstrap_timeout_seconds)));
  if (ok[0] == 0) {
    return Status(ErrorCode::kUnsupported,
                  mine.ok() ? "hierarchical: the shared-memory segment of another host could not "
                              "be created (see its ranks' logs)"
                            : "hierarchical: " + mine.message());
  }
  std::unique_ptr<FailureNotices> notices;
  KOLO_RETURN_IF_ERROR(world.create_failure_notices(&notices));
  auto poll = [n = notices.get()](std::string* why) { return n->received(why); };
  KOLO_RETURN_IF_ERROR(local->set_interrupt(poll));
  KOLO_RETURN_IF_ERROR(cross->set_interrupt(poll));
  const Topology t = world.topology();
  const std::string base = world.name();
  auto made = std::make_unique<hier::HierarchicalCommunicator>(
      std::move(comm), std::move(notices), std::move(local), std::move(cross), cross_ranks);
  made->set_shm_options(options.shm);
  comm = std::move(made);
  KOLO_LOG(kInfo, "hier") << "hierarchical transport: " << t.cross_size << " hosts x "
                          << t.local_size << " ranks (shared memory inside a host, " << base
                          << " across)";
  return Status::OK();
}

Status maybe_wrap_in_hierarchical(std::unique_ptr<Communicator>& comm, const HierOptions& options,
                                  bool* wrapped) {
  *wrapped = false;
  const std::string& mode = options.mode;
  if (mode == "0") return Status::OK();
  if (mode != "auto" && mode != "1") {
    return InvalidArgument("KOLO_HIERARCHICAL=" + mode + ": expected auto, 0 or 1");
  }
  const bool forced = mode == "1";
  const Topology t = comm->topology();
  if (t.local_size == t.size) {  // one host (the same answer on every rank)
    if (!forced) return Status::OK();
    return InvalidArgument(
        "KOLO_HIERARCHICAL=1 but all " + std::to_string(t.size) +
        " ranks are on one host; the hierarchical transport needs several (on one host the "
        "shm transport is used; unset KOLO_HIERARCHICAL, or fake hosts for a test with "
        "KOLO_TEST_HOSTS)");
  }
  if (options.shm.mode == "0") {
    if (!forced) {
      KOLO_LOG(kInfo, "hier") << "KOLO_SHM=0: not using the hierarchical transport";
      return Status::OK();
    }
    return InvalidArgument(
        "KOLO_HIERARCHICAL=1 and KOLO_SHM=0 conflict: the hierarchical transport runs its "
        "local phases in shared memory");
  }
  const Deadline deadline = after_seconds(options.shm.bootstrap_timeout_seconds);
  bool same = false;
  KOLO_RETURN_IF_ERROR(same_local_size(*comm, deadline, &same));
  if (!same) {
    if (!forced) {
      KOLO_LOG(kInfo, "hier") << "hosts run different numbers of ranks: using plain "
                              << comm->name() << " instead of the hierarchical transport";
      return Status::OK();
    }
    return InvalidArgument(
        "KOLO_HIERARCHICAL=1 but the hosts run different numbers of ranks; the hierarchical "
        "transport needs the same number on every host (rank " +
        std::to_string(t.rank) + "'s host runs " + std::to_string(t.local_size) + ")");
  }
  if (t.local_size == 1 && !forced) return Status::OK();  // nothing to share in memory
  const Status s = wrap_in_hierarchical(comm, options);
  if (s.ok()) {
    *wrapped = true;
    return s;
  }
  if (forced || s.code() == ErrorCode::kPeerFailure) return s;
  KOLO_LOG(kWarning, "hier") << "hierarchical transport unavailable, using " << comm->name() << ": "
                             << s.message();
  return Status::OK();
}

namespace hier {

Status HierarchicalCommunicator::subset(const std::vector<int>& ranks,
                                        std::unique_ptr<Communicator>* out) {
  out->reset();
  KOLO_RETURN_IF_ERROR(check("subset"));
  std::unique_ptr<Communicator> sub;
  KOLO_RETURN_IF_ERROR(record(global_->subset(ranks, &sub)));
  if (!sub || sub->size() == 1 || shm_options_.mode == "0") {
    *out = std::move(sub);
    return Status::OK();
  }
  // One host when the smallest and the largest host index of the members agree.
  const std::int32_t host = topology().cross_rank;
  std::int32_t v[2] = {host, -host};
  KOLO_RETURN_IF_ERROR(
      record(sub->allreduce(v, 2, DataType::kInt32, ReduceOp::kMin,
                            after_seconds(shm_options_.bootstrap_timeout_seconds))));
  if (v[0] == -v[1]) {
    const Status s = wrap_in_shm(sub, shm_options_, &ranks);
    if (s.code() == ErrorCode::kPeerFailure) return record(s);
    if (!s.ok()) {
      KOLO_LOG(kWarning, "hier") << "a subset of " << ranks.size() << " ranks on one host runs on "
                                 << sub->name() << " without shared memory: " << s.message();
    }
  }
  *out = std::move(sub);
  return Status::OK();
}

}  // namespace hier
}  // namespace kolo::transport
