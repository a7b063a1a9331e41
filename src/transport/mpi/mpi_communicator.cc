// The MPI transport's lifecycle (init, topology, teardown) and its data plane.
//
// Every collective is issued nonblocking on a private duplicate of MPI_COMM_WORLD (whose
// error handler returns codes instead of aborting) and completed by bounded polling, so a
// dead or hung peer becomes kPeerFailure at the caller's deadline. MPI cannot say which
// rank failed a collective, so data-plane errors name the operation and sizes only; the
// control plane (mpi_control.cc) is where missing ranks get named. Sub-communicators over
// the topology's host and cross groups (split_by_host) and subsets are made here too.
//
// Not for: the control plane, the dtype/op mapping (mpi_ops.cc), or the point-to-point
// ring allreduce of cross-host sub-communicators (mpi_ring.cc).
#include "transport/mpi/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <utility>

#include "common/logging.h"
#include "transport/arg_checks.h"
#include "transport/mpi/mpi_internal.h"
#include "transport/mpi/mpi_lifetime.h"

namespace kolo::transport {

Status create_mpi_communicator(std::unique_ptr<Communicator>* out) {
  return mpi::MpiCommunicator::create(MpiOptions{}, out);
}

Status create_mpi_communicator(const MpiOptions& options, std::unique_ptr<Communicator>* out) {
  return mpi::MpiCommunicator::create(options, out);
}

namespace mpi {
namespace {

// MPI counts are int. Larger allreduces and broadcasts are cut into chunks of this many
// elements/bytes; 2^30 keeps every chunk's byte count exact in an int for 1-byte types.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown MPI thread level";
}

}  // namespace

bool MpiCommunicator::calls_from_any_thread() const {
  int provided = MPI_THREAD_SINGLE;
  return MPI_Query_thread(&provided) == MPI_SUCCESS && provided >= MPI_THREAD_SERIALIZED;
}

Status MpiCommunicator::create(const MpiOptions& options, std::unique_ptr<Communicator>* out) {
  std::unique_ptr<MpiCommunicator> comm(new MpiCommunicator());
  KOLO_RETURN_IF_ERROR(comm->init(options));
  *out = std::move(comm);
  return Status::OK();
}

Status MpiCommunicator::init(const MpiOptions& options) {
  int provided = MPI_THREAD_SINGLE;
  KOLO_RETURN_IF_ERROR(ensure_mpi_initialized(&provided));
  // This thread makes every call. When kolo initialized MPI it did so on a thread of its
  // own (mpi_lifetime.h), so this thread is never MPI's main thread and needs at least
  // SERIALIZED; when the program did, FUNNELED suffices on the thread that initialized it.
  int is_main = 0;
  MPI_Is_thread_main(&is_main);
  if (provided < MPI_THREAD_FUNNELED || (provided == MPI_THREAD_FUNNELED && !is_main)) {
    return Status(ErrorCode::kUnsupported,
                  std::string("mpi: MPI provides ") + thread_level_name(provided) +
                      ", but kolo calls MPI from its background thread, which needs "
                      "MPI_THREAD_SERIALIZED or better (when the program initializes MPI on "
                      "that thread's behalf: MPI_Init_thread with MPI_THREAD_SERIALIZED or "
                      "MPI_THREAD_MULTIPLE; when kolo does, an MPI library built with thread "
                      "support)");
  }

  // After MPI_Init, a failed setup call means MPI is in trouble: leave it alone (broken_)
  // rather than risk a hang in MPI_Finalize.
  auto setup_failed = [this](const char* call, int rc) {
    broken_ = true;
    return Internal(std::string("mpi: ") + call + " failed: " + mpi_error_string(rc));
  };
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  if (rc != MPI_SUCCESS) return setup_failed("MPI_Comm_dup", rc);
  rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return setup_failed("MPI_Comm_set_errhandler", rc);
  MPI_Comm_rank(comm_, &topology_.rank);
  MPI_Comm_size(comm_, &topology_.size);

  const int hosts = options.test_hosts;
  if (hosts > topology_.size) {
    // Every rank sees the same value (mpirun -x), so every rank fails here alike.
    return InvalidArgument("mpi: KOLO_TEST_HOSTS=" + std::to_string(hosts) +
                           " but there are only " + std::to_string(topology_.size) +
                           " ranks (test-only: at most one host per rank)");
  }
  if (hosts > 0) {
    // Test-only fake hosts: contiguous blocks of ranks (see MpiOptions::test_hosts).
    const int host =
        static_cast<int>(static_cast<long long>(topology_.rank) * hosts / topology_.size);
    rc = MPI_Comm_split(comm_, host, topology_.rank, &host_comm_);
    if (rc != MPI_SUCCESS) return setup_failed("MPI_Comm_split", rc);
  } else {
    rc = MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, topology_.rank, MPI_INFO_NULL,
                             &host_comm_);
    if (rc != MPI_SUCCESS) return setup_failed("MPI_Comm_split_type", rc);
  }
  MPI_Comm_rank(host_comm_, &topology_.local_rank);
  MPI_Comm_size(host_comm_, &topology_.local_size);

  // Ranks with the same local rank, one per host, ordered like the world ranks.
  rc = MPI_Comm_split(comm_, topology_.local_rank, topology_.rank, &cross_comm_);
  if (rc != MPI_SUCCESS) return setup_failed("MPI_Comm_split", rc);
  MPI_Comm_rank(cross_comm_, &topology_.cross_rank);
  MPI_Comm_size(cross_comm_, &topology_.cross_size);

  rc = ops_.create();
  if (rc != MPI_SUCCESS) return setup_failed("MPI_Op_create", rc);
  return Status::OK();
}

MpiCommunicator::MpiCommunicator() { communicator_created(); }

MpiCommunicator::~MpiCommunicator() {
  // MPI itself is finalized at process exit (mpi_lifetime.h), unless a communicator broke.
  communicator_destroyed(broken_);
  // A broken communicator may still have requests in flight that reference freed buffers
  // and peers that will never answer: touching MPI again (MPI_Finalize in particular,
  // which synchronizes with every rank) could hang the exiting process.
  if (broken_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // the program finalized MPI first; our handles died with it
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return;
  ops_.free();
  if (host_comm_ != MPI_COMM_NULL) MPI_Comm_free(&host_comm_);
  if (cross_comm_ != MPI_COMM_NULL) MPI_Comm_free(&cross_comm_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status MpiCommunicator::split_by_host(HostGroup group, std::unique_ptr<Communicator>* out,
                                      std::vector<int>* world_ranks) {
  KOLO_RETURN_IF_ERROR(check_usable("split"));
  const bool host = group == MpiGroup::kHost;
  MPI_Comm from = host ? host_comm_ : cross_comm_;
  if (from == MPI_COMM_NULL) {
    return InvalidArgument(where("split") +
                           ": only a communicator made by create_mpi_communicator "
                           "can be split");
  }
  std::unique_ptr<MpiCommunicator> sub(new MpiCommunicator());
  KOLO_RETURN_IF_ERROR(sub->init_sub(from, host ? "mpi[host]" : "mpi[cross]"));
  if (host) {
    sub->topology_.local_rank = sub->topology_.rank;
    sub->topology_.local_size = sub->topology_.size;
  } else {
    sub->topology_.cross_rank = sub->topology_.rank;
    sub->topology_.cross_size = sub->topology_.size;
    sub->ring_min_bytes_ = kCrossRingMinBytes;
  }
  // The members' world ranks: translate 0..n-1 of the sub-communicator's group.
  MPI_Group sub_group, world_group;
  MPI_Comm_group(sub->comm_, &sub_group);
  MPI_Comm_group(comm_, &world_group);
  std::vector<int> members(static_cast<std::size_t>(sub->size()));
  for (int i = 0; i < sub->size(); ++i) members[i] = i;
  world_ranks->assign(members.size(), 0);
  MPI_Group_translate_ranks(sub_group, sub->size(), members.data(), world_group,
                            world_ranks->data());
  MPI_Group_free(&sub_group);
  MPI_Group_free(&world_group);
  *out = std::move(sub);
  return Status::OK();
}

Status MpiCommunicator::subset(const std::vector<int>& ranks, std::unique_ptr<Communicator>* out) {
  KOLO_RETURN_IF_ERROR(check_usable("subset"));
  out->reset();
  const auto it = std::find(ranks.begin(), ranks.end(), rank());
  const int color = it == ranks.end() ? MPI_UNDEFINED : 0;
  const int key = it == ranks.end() ? 0 : static_cast<int>(it - ranks.begin());
  MPI_Comm group = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(comm_, color, key, &group);
  if (rc != MPI_SUCCESS) return fail_mpi(where("subset") + ": MPI_Comm_split", rc);
  if (group == MPI_COMM_NULL) return Status::OK();
  std::unique_ptr<MpiCommunicator> sub(new MpiCommunicator());
  const Status s = sub->init_sub(group, "mpi[subset]");
  MPI_Comm_free(&group);
  KOLO_RETURN_IF_ERROR(s);
  // Ranks of one host stay together; the subset's own grouping is not computed.
  sub->topology_.local_rank = sub->topology_.rank;
  sub->topology_.local_size = sub->topology_.size;
  *out = std::move(sub);
  return Status::OK();
}

Status MpiCommunicator::init_sub(MPI_Comm group, const char* label) {
  label_ = label;
  int rc = MPI_Comm_dup(group, &comm_);
  if (rc != MPI_SUCCESS) {
    broken_ = true;
    return Internal(std::string(label) + ": MPI_Comm_dup failed: " + mpi_error_string(rc));
  }
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &topology_.rank);
  MPI_Comm_size(comm_, &topology_.size);
  rc = ops_.create();
  if (rc != MPI_SUCCESS) {
    broken_ = true;
    return Internal(std::string(label) + ": MPI_Op_create failed: " + mpi_error_string(rc));
  }
  return Status::OK();
}

std::string MpiCommunicator::where(const char* op) const {
  return std::string(label_) + " " + op + " on rank " + std::to_string(rank()) + " of " +
         std::to_string(size());
}

Status MpiCommunicator::check_usable(const char* op) const {
  if (!broken_) return Status::OK();
  return PeerFailure(where(op) + ": the communicator is broken by an earlier failure (" +
                     broken_reason_ + ")");
}

Status MpiCommunicator::fail(std::string message) {
  if (!broken_) {
    broken_ = true;
    broken_reason_ = message;
  }
  return PeerFailure(std::move(message));
}

Status MpiCommunicator::fail_mpi(const std::string& what, int code) {
  return fail(what + ": " + mpi_error_string(code));
}

namespace {

// Converts per-rank byte counts into MPI's int counts and displacements, or explains
// which entry does not fit (MPI 3 has no large-count collectives).
Status int_layout(const std::string& where, const char* name, const std::vector<std::size_t>& bytes,
                  std::vector<int>* counts, std::vector<int>* displs) {
  counts->resize(bytes.size());
  displs->resize(bytes.size());
  std::size_t offset = 0;
  for (std::size_t r = 0; r < bytes.size(); ++r) {
    if (bytes[r] > static_cast<std::size_t>(INT_MAX)) {
      return InvalidArgument(where + ": " + name + "[" + std::to_string(r) + "] is " +
                             std::to_string(bytes[r]) + " bytes; MPI counts are int, so at most " +
                             std::to_string(INT_MAX) + " bytes per rank (split the tensor)");
    }
    if (offset > static_cast<std::size_t>(INT_MAX)) {
      return InvalidArgument(where + ": the " + name + " before rank " + std::to_string(r) +
                             " add up to " + std::to_string(offset) +
                             " bytes; MPI displacements are int, so at most " +
                             std::to_string(INT_MAX) + " (split the tensor)");
    }
    (*counts)[r] = static_cast<int>(bytes[r]);
    (*displs)[r] = static_cast<int>(offset);
    offset += bytes[r];
  }
  return Status::OK();
}

}  // namespace

Status MpiCommunicator::allreduce(void* buffer, std::size_t count, DataType dtype, ReduceOp op,
                                  Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("allreduce"));
  if (op == ReduceOp::kAverage) {
    return InvalidArgument(where("allreduce") +
                           ": average is not a transport op (the runtime sums, then scales)");
  }
  if (count == 0) return Status::OK();
  const auto start = Clock::now();
  const std::size_t element = dtype_size(dtype);
  auto* bytes = static_cast<char*>(buffer);
  if (ring_min_bytes_ > 0 && count * element >= ring_min_bytes_ && size() > 1) {
    return ring_allreduce(bytes, count, dtype, op, start, deadline);
  }
  const Reduction reduction = ops_.lookup(dtype, op);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(count - done, kMaxChunk);
    MPI_Request request;
    const int rc = MPI_Iallreduce(MPI_IN_PLACE, bytes + done * element, static_cast<int>(n),
                                  reduction.type, reduction.op, comm_, &request);
    auto describe = [&] {
      return where("allreduce") + " (" + std::to_string(count) + " " + dtype_name(dtype) +
             " elements, " + reduce_op_name(op) + ")";
    };
    if (rc != MPI_SUCCESS) return fail_mpi(describe(), rc);
    KOLO_RETURN_IF_ERROR(complete(&request, 1, start, deadline, describe));
    done += n;
  }
  return Status::OK();
}

Status MpiCommunicator::allgatherv(const void* send, void* recv,
                                   const std::vector<std::size_t>& recv_bytes, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("allgatherv"));
  if (recv_bytes.size() != static_cast<std::size_t>(size())) {
    return InvalidArgument(where("allgatherv") + ": recv_bytes has " +
                           std::to_string(recv_bytes.size()) + " entries, expected one per rank");
  }
  KOLO_RETURN_IF_ERROR(
      int_layout(where("allgatherv"), "recv_bytes", recv_bytes, &counts_, &displs_));
  // recv_bytes is the same on every rank, so every rank skips an empty gather together.
  if (static_cast<std::size_t>(displs_.back()) + recv_bytes.back() == 0) return Status::OK();
  const auto start = Clock::now();
  MPI_Request request;
  const int rc = MPI_Iallgatherv(send, counts_[rank()], MPI_BYTE, recv, counts_.data(),
                                 displs_.data(), MPI_BYTE, comm_, &request);
  auto describe = [&] {
    return where("allgatherv") + " (" + std::to_string(recv_bytes[rank()]) +
           " bytes from this rank, " +
           std::to_string(static_cast<std::size_t>(displs_.back()) + recv_bytes.back()) +
           " bytes in all)";
  };
  if (rc != MPI_SUCCESS) return fail_mpi(describe(), rc);
  return complete(&request, 1, start, deadline, describe);
}

Status MpiCommunicator::broadcast(void* buffer, std::size_t bytes, int root, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("broadcast"));
  if (root < 0 || root >= size()) {
    return InvalidArgument(where("broadcast") + ": root " + std::to_string(root) +
                           " is not a rank (0.." + std::to_string(size() - 1) + ")");
  }
  if (bytes == 0) return Status::OK();
  const auto start = Clock::now();
  auto* p = static_cast<char*>(buffer);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t n = std::min(bytes - done, kMaxChunk);
    MPI_Request request;
    const int rc = MPI_Ibcast(p + done, static_cast<int>(n), MPI_BYTE, root, comm_, &request);
    auto describe = [&] {
      return where("broadcast") + " (" + std::to_string(bytes) + " bytes from root " +
             std::to_string(root) + ")";
    };
    if (rc != MPI_SUCCESS) return fail_mpi(describe(), rc);
    KOLO_RETURN_IF_ERROR(complete(&request, 1, start, deadline, describe));
    done += n;
  }
  return Status::OK();
}

Status MpiCommunicator::alltoallv(const void* send, const std::vector<std::size_t>& send_bytes,
                                  void* recv, const std::vector<std::size_t>& recv_bytes,
                                  Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("alltoallv"));
  KOLO_RETURN_IF_ERROR(check_alltoallv_counts(where("alltoallv"), size(), send_bytes, recv_bytes));
  KOLO_RETURN_IF_ERROR(
      int_layout(where("alltoallv"), "send_bytes", send_bytes, &counts_, &displs_));
  KOLO_RETURN_IF_ERROR(
      int_layout(where("alltoallv"), "recv_bytes", recv_bytes, &counts2_, &displs2_));
  // No shortcut for empty exchanges: the byte counts differ between ranks, so a rank with
  // nothing to move cannot know that every other rank skips too.
  const auto start = Clock::now();
  MPI_Request request;
  const int rc = MPI_Ialltoallv(send, counts_.data(), displs_.data(), MPI_BYTE, recv,
                                counts2_.data(), displs2_.data(), MPI_BYTE, comm_, &request);
  auto describe = [&] {
    return where("alltoallv") + " (" +
           std::to_string(static_cast<std::size_t>(displs_.back()) + send_bytes.back()) +
           " bytes out, " +
           std::to_string(static_cast<std::size_t>(displs2_.back()) + recv_bytes.back()) +
           " bytes in)";
  };
  if (rc != MPI_SUCCESS) return fail_mpi(describe(), rc);
  return complete(&request, 1, start, deadline, describe);
}

Status MpiCommunicator::reducescatter(const void* send, void* recv,
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
  counts_.resize(counts.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > static_cast<std::size_t>(INT_MAX)) {
      return InvalidArgument(where("reducescatter") + ": counts[" + std::to_string(r) + "] is " +
                             std::to_string(counts[r]) +
                             " elements; MPI counts are int, so at most " +
                             std::to_string(INT_MAX) + " per rank (split the tensor)");
    }
    counts_[r] = static_cast<int>(counts[r]);
    total += counts[r];
  }
  if (total == 0) return Status::OK();  // counts are the same on every rank
  const auto start = Clock::now();
  const Reduction reduction = ops_.lookup(dtype, op);
  // send == recv is MPI's in-place form: the input is read from recv, which then holds
  // sum(counts) elements, and this rank's block lands at its start.
  const void* input = send == recv ? MPI_IN_PLACE : send;
  MPI_Request request;
  const int rc = MPI_Ireduce_scatter(input, recv, counts_.data(), reduction.type, reduction.op,
                                     comm_, &request);
  auto describe = [&] {
    return where("reducescatter") + " (" + std::to_string(total) + " " + dtype_name(dtype) +
           " elements, " + reduce_op_name(op) + ", " + std::to_string(counts[rank()]) +
           " to this rank)";
  };
  if (rc != MPI_SUCCESS) return fail_mpi(describe(), rc);
  return complete(&request, 1, start, deadline, describe);
}

Status MpiCommunicator::barrier(Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("barrier"));
  const auto start = Clock::now();
  MPI_Request request;
  const int rc = MPI_Ibarrier(comm_, &request);
  auto describe = [&] { return where("barrier"); };
  if (rc != MPI_SUCCESS) return fail_mpi(describe(), rc);
  return complete(&request, 1, start, deadline, describe);
}

}  // namespace mpi
}  // namespace kolo::transport
