// The shm transport's lifecycle: options, the bootstrap over the base communicator, the
// selection policy of the transport table, and the operations delegated to the base.
//
// Bootstrap (every rank, collectively):
//   1. rank 0 creates the segment (or fails: no room in /dev/shm, no shm_open, ...);
//   2. base control_broadcast of "ok <name>" or "error <why>": all ranks learn the outcome;
//   3. the others open and map it; everyone records its pid and takes its liveness lock;
//   4. base control_and of "I succeeded": the same verdict on every rank, and a barrier;
//   5. rank 0 unlinks the name at once, success or not, so a rank killed from now on
//      cannot leak the segment: the memory goes away with the last mapping.
//
// Not for: the collectives run in the segment (shm_collectives.cc).
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "common/logging.h"
#include "transport/shm/shm_communicator.h"
#include "transport/shm/shm_internal.h"

namespace kolo::transport {

std::size_t shm_region_bytes(long long fusion_threshold) {
  constexpr std::size_t kPage = 4096;
  std::size_t bytes = fusion_threshold > 0 ? static_cast<std::size_t>(fusion_threshold) : 0;
  if (bytes < shm::kMinRegion) bytes = std::size_t{4} << 20;
  return (bytes + kPage - 1) / kPage * kPage;
}

ShmOptions shm_options(const std::string& mode, long long fusion_threshold) {
  ShmOptions o;
  o.mode = mode;
  o.region_bytes = shm_region_bytes(fusion_threshold);
  return o;
}

Status shm_allreduce_staged(Communicator& comm, void* buffer, std::size_t count, DataType dtype,
                            ReduceOp op, const SliceStage& stage, Deadline deadline) {
  auto* shm = dynamic_cast<shm::ShmCommunicator*>(&comm);
  if (shm == nullptr) {
    return InvalidArgument(std::string("shm_allreduce_staged: the communicator is '") +
                           comm.name() + "', not one made by wrap_in_shm");
  }
  return shm->allreduce_staged(buffer, count, dtype, op, &stage, deadline);
}

Status wrap_in_shm(std::unique_ptr<Communicator>& comm, const ShmOptions& options,
                   const std::vector<int>* rank_names) {
  Communicator& base = *comm;
  const int n = base.size(), me = base.rank();
  const Deadline deadline = deadline_after(options.bootstrap_timeout_seconds);
  shm::Segment seg;
  std::string message;
  if (me == 0) {
    const Status s = shm::Segment::create(n, options.region_bytes, &seg);
    message = s.ok() ? "ok " + seg.name() : "error " + s.message();
  }
  KOLO_RETURN_IF_ERROR(base.control_broadcast(&message, deadline));
  if (message.rfind("error ", 0) == 0) {
    return Status(ErrorCode::kUnsupported, message.substr(6) + " (reported by rank 0)");
  }
  const std::string name = message.substr(3);
  Status mine = Status::OK();
  if (me != 0) mine = shm::Segment::open(name, n, &seg);
  if (mine.ok()) mine = seg.join(me);
  if (!mine.ok()) {
    KOLO_LOG(kWarning, "shm") << "rank " << me << ": " << mine.message();
  }
  std::vector<std::uint64_t> ok = {mine.ok() ? 1u : 0u};
  const Status agreed = base.control_and(ok, deadline);
  if (me == 0) shm::Segment::unlink(name);
  KOLO_RETURN_IF_ERROR(agreed);
  if (ok[0] == 0) {
    return Status(
        ErrorCode::kUnsupported,
        mine.ok() ? "shm: another rank could not map the segment (see its log)" : mine.message());
  }
  const std::size_t region = seg.region_bytes();
  auto wrapped = std::make_unique<shm::ShmCommunicator>(std::move(comm), std::move(seg));
  if (rank_names) wrapped->set_rank_names(*rank_names);
  wrapped->set_options(options);
  comm = std::move(wrapped);
  KOLO_LOG(kInfo, "shm") << "shared-memory transport: " << n << " ranks, regions of "
                         << (region >> 10) << " KiB";
  return Status::OK();
}

Status maybe_wrap_in_shm(std::unique_ptr<Communicator>& comm, const ShmOptions& options) {
  if (options.mode == "0") return Status::OK();
  const Topology& t = comm->topology();
  const bool one_host = t.local_size == t.size;
  if (options.mode == "1") {
    if (!one_host) {
      return InvalidArgument("KOLO_SHM=1 but the " + std::to_string(t.size) + " ranks span " +
                             std::to_string(t.cross_size) +
                             " hosts; the shm transport needs every rank on one host (unset "
                             "KOLO_SHM to use it only where it applies)");
    }
    return wrap_in_shm(comm, options);
  }
  if (!one_host || t.size == 1) return Status::OK();
  const Status s = wrap_in_shm(comm, options);
  if (!s.ok()) {
    if (s.code() == ErrorCode::kPeerFailure)
      return s;  // the base is broken: nothing to fall back to
    KOLO_LOG(kWarning, "shm") << "shared-memory transport unavailable, using " << comm->name()
                              << ": " << s.message();
  }
  return Status::OK();
}

namespace shm {
namespace {

std::vector<std::uint32_t*> bell_rings(const Segment& seg, int size) {
  std::vector<std::uint32_t*> rings;
  for (int r = 0; r < size; ++r) rings.push_back(&seg.slot(r).bell);
  return rings;
}

}  // namespace

ShmCommunicator::ShmCommunicator(std::unique_ptr<Communicator> base, Segment segment)
    : base_(std::move(base)),
      seg_(std::move(segment)),
      barrier_(&seg_, base_->rank(), base_->size()),
      bell_(&seg_.wake().cycles_requested, bell_rings(seg_, base_->size()), base_->rank(),
            /*lazy=*/true),
      nudge_([this](int r) { bell_.nudge(r); }),
      srcs_(static_cast<std::size_t>(base_->size())),
      chunks_(static_cast<std::size_t>(base_->size())) {}

ShmCommunicator::~ShmCommunicator() {
  if (!barrier_.broken()) return;
  Communicator* leaked = base_.release();  // on purpose, see the header
#if defined(__SANITIZE_ADDRESS__)
  __lsan_ignore_object(leaked);
#else
  (void)leaked;
#endif
}

Status ShmCommunicator::check(const char* op) const {
  if (!base_failure_.empty()) {
    return PeerFailure(std::string("shm ") + op +
                       ": the base communicator failed earlier: " + base_failure_);
  }
  return barrier_.check(op);
}

Status ShmCommunicator::delegated(Status s) {
  if (s.code() == ErrorCode::kPeerFailure && base_failure_.empty()) base_failure_ = s.message();
  return s;
}

Status ShmCommunicator::allgatherv(const void* send, void* recv,
                                   const std::vector<std::size_t>& recv_bytes, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("allgatherv"));
  return delegated(base_->allgatherv(send, recv, recv_bytes, deadline));
}

Status ShmCommunicator::alltoallv(const void* send, const std::vector<std::size_t>& send_bytes,
                                  void* recv, const std::vector<std::size_t>& recv_bytes,
                                  Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("alltoallv"));
  return delegated(base_->alltoallv(send, send_bytes, recv, recv_bytes, deadline));
}

Status ShmCommunicator::reducescatter(const void* send, void* recv,
                                      const std::vector<std::size_t>& counts, DataType dtype,
                                      ReduceOp op, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("reducescatter"));
  return delegated(base_->reducescatter(send, recv, counts, dtype, op, deadline));
}

Status ShmCommunicator::control_gather(const std::string& mine, std::vector<std::string>* all,
                                       Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("control_gather"));
  return delegated(base_->control_gather(mine, all, deadline));
}

Status ShmCommunicator::control_broadcast(std::string* message, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check("control_broadcast"));
  return delegated(base_->control_broadcast(message, deadline));
}

Status ShmCommunicator::subset(const std::vector<int>& ranks, std::unique_ptr<Communicator>* out) {
  out->reset();
  KOLO_RETURN_IF_ERROR(check("subset"));
  std::unique_ptr<Communicator> sub;
  KOLO_RETURN_IF_ERROR(delegated(base_->subset(ranks, &sub)));
  if (sub && sub->size() > 1) {
    std::vector<int> names;
    for (int r : ranks) {
      names.push_back(r < static_cast<int>(rank_names_.size()) ? rank_names_[r] : r);
    }
    const Status s = wrap_in_shm(sub, options_, &names);
    if (s.code() == ErrorCode::kPeerFailure) return delegated(s);
    if (!s.ok()) {
      KOLO_LOG(kWarning, "shm") << "a subset of " << sub->size() << " ranks runs on " << sub->name()
                                << " without shared memory: " << s.message();
    }
  }
  *out = std::move(sub);
  return Status::OK();
}

}  // namespace shm
}  // namespace kolo::transport
