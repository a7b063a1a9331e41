// Internals shared by the MPI transport's source files: the MpiCommunicator class, the
// bounded polling loop every operation completes through, and the dtype/op mapping.
//
// Not for use outside src/transport/mpi/ (it includes <mpi.h>); everything else reaches this
// transport through create_mpi_communicator() and the Communicator interface.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "kolo/types.h"
#include "transport/communicator.h"
#include "transport/mpi/mpi_communicator.h"

namespace kolo::transport::mpi {

// --- dtypes and reduce ops (mpi_ops.cc) -------------------------------------------------

struct Reduction {
  MPI_Datatype type;
  MPI_Op op;
};

// MPI has no float16/bfloat16, so those reduce through user-defined ops that call
// kolo::reduce_into; every other (dtype, op) maps to a builtin pair. The user ops are
// created once per communicator and freed with it.
class ReduceOps {
 public:
  int create();  // MPI error code
  void free();
  // `op` must not be kAverage.
  Reduction lookup(DataType dtype, ReduceOp op) const;

 private:
  static constexpr int kOps = 4;  // sum, min, max, product
  MPI_Op half_[kOps] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op bfloat16_[kOps] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

// "MPI_ERR_TRUNCATE: message truncated" from an MPI error code.
std::string mpi_error_string(int code);
// Seconds as "2.0 s", for messages.
std::string seconds_string(Clock::duration d);

// --- bounded polling --------------------------------------------------------------------

// How a wait for MPI requests ends.
enum class WaitResult { kDone, kTimeout, kMpiError };

// Calls `test(&done)` (which returns an MPI error code) until it reports done, fails, or
// `deadline` passes. The first `spin` is a busy loop, which keeps a lockstep round trip in
// the microseconds; after that the thread naps, doubling from 10 us up to `max_nap`
// (Linux timer slack adds ~50 us to each), so that a thread waiting for a slow peer costs
// little of a core. The control plane's default of 1 ms matters during training: a rank
// waiting in negotiation for a peer still in backward otherwise woke ~4700 times a second
// and took that time from its own compute thread (docs/history/benchmarks.md); 1 ms is the cycle
// time, the granularity negotiation works at anyway. OpenMPI moves data only inside MPI
// calls, so every nap also pauses transfers in flight; the data plane therefore spins
// longer and naps at most 160 us (kDataSpin, kDataMaxNap).
template <typename Test>
WaitResult poll_until(Deadline deadline, Test&& test, int* mpi_error,
                      std::chrono::microseconds spin = std::chrono::microseconds(80),
                      std::chrono::microseconds max_nap = std::chrono::microseconds(1000)) {
  using std::chrono::microseconds;
  constexpr microseconds kFirstNap(10);
  const microseconds kMaxNap = max_nap;
  bool done = false;
  const auto spin_end = Clock::now() + spin;
  microseconds nap = kFirstNap;
  for (;;) {
    const int rc = test(&done);
    if (rc != MPI_SUCCESS) {
      *mpi_error = rc;
      return WaitResult::kMpiError;
    }
    if (done) return WaitResult::kDone;
    const auto now = Clock::now();
    if (now >= deadline) return WaitResult::kTimeout;
    if (now >= spin_end) {
      std::this_thread::sleep_for(nap);
      if (nap < kMaxNap) nap *= 2;
    }
  }
}

// --- the communicator -------------------------------------------------------------------

// Data-plane calls come right after negotiation, when every rank is about to make them,
// so waits are short and naps would mostly add latency: spinning only 80 us made a 1-float
// allreduce on 4 ranks sharing 2 cores take ~1 ms instead of ~25 us.
inline constexpr std::chrono::microseconds kDataSpin(2000);
// Past the spin, naps stay short: transfers in flight progress only inside MPI calls.
inline constexpr std::chrono::microseconds kDataMaxNap(160);
// Cross-host sub-communicators (split_by_host, kCross) reduce buffers of at least
// this many bytes with the point-to-point ring (mpi_ring.cc) instead of MPI_Iallreduce.
inline constexpr std::size_t kCrossRingMinBytes = std::size_t{256} << 10;

// Owned and used by one thread. State changes only from usable to broken: after the first
// peer failure or MPI error every call fails at once, and the destructor no longer talks
// to MPI (requests of the failed call may still be pending; MPI_Finalize could hang).
class MpiCommunicator final : public Communicator {
 public:
  static Status create(const MpiOptions& options, std::unique_ptr<Communicator>* out);
  // Composition (communicator.h): host and cross groups, subsets, notices, interrupts.
  Status split_by_host(HostGroup group, std::unique_ptr<Communicator>* out,
                       std::vector<int>* world_ranks) override;
  Status subset(const std::vector<int>& ranks, std::unique_ptr<Communicator>* out) override;
  Status create_failure_notices(std::unique_ptr<FailureNotices>* out) override;
  Status set_interrupt(Interrupt interrupt) override {
    interrupt_ = std::move(interrupt);
    return Status::OK();
  }
  MPI_Comm handle() const { return comm_; }
  ~MpiCommunicator() override;

  const Topology& topology() const override { return topology_; }
  const char* name() const override { return "mpi"; }
  // MPI_THREAD_SERIALIZED or better (kolo asks for MULTIPLE when it initialises MPI).
  bool calls_from_any_thread() const override;

  Status allreduce(void* buffer, std::size_t count, DataType dtype, ReduceOp op,
                   Deadline deadline) override;
  Status allgatherv(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    Deadline deadline) override;
  Status broadcast(void* buffer, std::size_t bytes, int root, Deadline deadline) override;
  Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                   const std::vector<std::size_t>& recv_bytes, Deadline deadline) override;
  Status reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                       DataType dtype, ReduceOp op, Deadline deadline) override;
  Status barrier(Deadline deadline) override;

  Status control_and(std::vector<std::uint64_t>& words, Deadline deadline) override;
  Status control_gather(const std::string& mine, std::vector<std::string>* all,
                        Deadline deadline) override;
  Status control_broadcast(std::string* message, Deadline deadline) override;
  void set_wait_observer(WaitObserver observer) override { observer_ = std::move(observer); }

 private:
  MpiCommunicator();
  Status init(const MpiOptions& options);
  // Makes this a communicator over a duplicate of `group` of `parent` (split()).
  Status init_sub(MPI_Comm group, const char* label);

  // kPeerFailure while broken, else OK.
  Status check_usable(const char* op) const;
  // Marks the communicator broken and returns kPeerFailure(message).
  Status fail(std::string message);
  // Breaks the communicator because an MPI call returned `code`.
  Status fail_mpi(const std::string& what, int code);
  // Completes `n` data-plane requests by `deadline`; `describe()` names the operation in
  // the error (built only on failure, so the success path allocates nothing).
  template <typename Describe>
  Status complete(MPI_Request* requests, int n, Clock::time_point start, Deadline deadline,
                  Describe describe);
  // "mpi allreduce on rank 1 of 4: " — the prefix of every error message.
  std::string where(const char* op) const;

  // Control plane (mpi_control.cc).
  Status control_and_root(std::vector<std::uint64_t>& words, Clock::time_point start,
                          Deadline deadline);
  Status control_and_member(std::vector<std::uint64_t>& words, Clock::time_point start,
                            Deadline deadline);
  // Rank 0 only: tells every rank not in `missing` which ranks failed (bounded by a short
  // grace), then breaks the communicator with `message`.
  Status root_failure(int op_code, const std::vector<int>& missing, std::string message);
  // Receives one root->member message into down_ (room for `capacity` bytes) as
  // requests_[0], completing it together with this rank's own sends in requests_[1..].
  // Waits a grace period past `deadline`, since rank 0 decides only at its deadline. Fails
  // naming rank 0 when nothing comes, or the ranks rank 0 reports in a failure notice;
  // otherwise the message must be of `kind`, and its header value and size are returned.
  Status receive_down(const char* op, std::size_t capacity, unsigned kind, Clock::time_point start,
                      Deadline deadline, std::uint64_t* value, std::size_t* bytes);
  // Ring allreduce over point-to-point messages (mpi_ring.cc).
  Status ring_allreduce(char* data, std::size_t count, DataType dtype, ReduceOp op,
                        Clock::time_point start, Deadline deadline);
  std::size_t mask_words() const { return (static_cast<std::size_t>(size()) + 63) / 64; }

  Topology topology_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  // The host and cross groups of the topology (world communicators only; kept for split()).
  MPI_Comm host_comm_ = MPI_COMM_NULL;
  MPI_Comm cross_comm_ = MPI_COMM_NULL;
  const char* label_ = "mpi";       // "mpi[host]", "mpi[cross]" for sub-communicators
  std::size_t ring_min_bytes_ = 0;  // allreduce uses the ring from this size on; 0: never
  std::vector<char> scratch_;       // the ring's receive buffer
  Interrupt interrupt_;             // see set_interrupt
  bool broken_ = false;
  std::string broken_reason_;
  ReduceOps ops_;

  // Scratch reused across calls so the per-cycle paths do not allocate in steady state.
  std::vector<MPI_Request> requests_;
  std::vector<MPI_Status> statuses_;
  std::vector<int> indices_;
  std::vector<int> counts_, displs_, counts2_, displs2_;
  std::vector<std::uint64_t> up_;      // rank 0: words received from the other ranks
  std::vector<std::uint64_t> down_;    // rank 0: the and-reply; others: what rank 0 sends
  std::vector<std::uint64_t> head_;    // an outgoing gather or broadcast head
  std::vector<std::uint64_t> notice_;  // rank 0: the failure notice (see root_failure)
  std::vector<char> arrived_;          // rank 0: which ranks took part in this call
  std::vector<int> missing_;
  WaitObserver observer_;
  Clock::time_point next_report_{};
  // Tells observer_ (at most once a second, after the first) that a control call that
  // began at `start` still waits for the ranks whose requests[first + r - 1] are pending,
  // or (without requests) for the ranks whose arrived_ entry is 0.
  void observe_wait(Clock::time_point start, const std::vector<MPI_Request>* requests,
                    std::size_t first);
};

template <typename Describe>
Status MpiCommunicator::complete(MPI_Request* requests, int n, Clock::time_point start,
                                 Deadline deadline, Describe describe) {
  int error = MPI_SUCCESS;
  bool interrupted = false;
  std::string why;
  const WaitResult result = poll_until(
      deadline,
      [&](bool* done) {
        int flag = 0;
        const int rc = MPI_Testall(n, requests, &flag, MPI_STATUSES_IGNORE);
        *done = flag != 0;
        if (!*done && interrupt_ && interrupt_(&why)) *done = interrupted = true;
        return rc;
      },
      &error, kDataSpin, kDataMaxNap);
  switch (result) {
    case WaitResult::kDone:
      if (interrupted) return fail(describe() + " was interrupted: " + why);
      return Status::OK();
    case WaitResult::kMpiError:
      return fail_mpi(describe(), error);
    case WaitResult::kTimeout:
      break;
  }
  return fail(describe() + " did not complete within " + seconds_string(deadline - start) +
              ": some rank is dead, hung or not calling it (MPI cannot tell which)");
}

}  // namespace kolo::transport::mpi
