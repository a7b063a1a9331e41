// Communicator: the byte-level collectives kolo's runtime runs on.
//
// The runtime (src/core) sees only this interface; one folder per implementation
// (inproc/, mpi/, later gloo/, shm/, nccl/). All ranks call the collectives in the same
// order (the runtime's negotiation guarantees it). Every call takes a deadline: a peer
// that does not take part by then makes the call fail with kPeerFailure, and the message
// names the ranks that did not answer when the implementation can know them. After a
// kPeerFailure the communicator is broken; the runtime stops using it.
//
// Buffers are host memory. Not for: tensor semantics (averaging, scaling, joins), which
// the runtime implements on top.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "kolo/types.h"
#include "transport/cycle_bell.h"

namespace kolo::transport {

using Clock = kolo::Clock;
using Deadline = kolo::Deadline;  // common/deadline.h

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

// One tensor of allreduce_pieces(): `count` elements of this rank's contribution at `in`
// (multiplied by `prescale` first), and where the result goes (multiplied by
// postscale / divisor, with scale_into()'s rounding rules). `in` == `out` is allowed;
// pieces must not otherwise overlap each other.
struct AllreducePiece {
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t count = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  double divisor = 1.0;
};

// The groups a communicator splits into by host (split_by_host): kHost holds the ranks of
// this rank's host, kCross the ranks with this rank's local rank (one per host).
enum class HostGroup { kHost, kCross };

// Failure notices between the ranks of a communicator. Some transports cannot tell a rank
// that a peer it waits for has died (MPI); a rank that learns of a failure some other way
// (the shm transport sees host-mates die) announces it here, and every rank that polls
// received() while it waits fails at once instead of at its deadline. Owned and used by
// the communicator's thread; destroy it before the communicator it came from.
class FailureNotices {
 public:
  virtual ~FailureNotices() = default;
  // Sends `message` to every other rank, once (later calls, and calls after a notice
  // arrived, do nothing); waits at most 100 ms for the sends to leave.
  virtual void announce(const std::string& message) = 0;
  // True once another rank announced a failure; *message is "rank N reported: ...".
  virtual bool received(std::string* message) = 0;
};

// Polled while a communicator's call waits (set_interrupt): returning true (with a
// reason) ends the wait with kPeerFailure and breaks the communicator.
using Interrupt = std::function<bool(std::string* why)>;

// A transport's switch between two allreduce algorithms (hierarchical: shared memory per
// host and the base transport across hosts; or flat over all ranks), for autotune. Every
// rank must switch between the same two calls (the runtime does it between the same two
// cycles). Results are the same either way up to the order of the fold.
class AlgorithmSwitch {
 public:
  virtual ~AlgorithmSwitch() = default;
  virtual bool hierarchical() const = 0;
  virtual void set_hierarchical(bool on) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual const Topology& topology() const = 0;
  int rank() const { return topology().rank; }
  int size() const { return topology().size; }
  // "inproc", "mpi", ...: shown in logs and errors.
  virtual const char* name() const = 0;

  // --- data plane ----------------------------------------------------------------------
  // In place: buffer = op(buffer over ranks). `op` is never kAverage.
  virtual Status allreduce(void* buffer, std::size_t count, DataType dtype, ReduceOp op,
                           Deadline deadline) = 0;
  // Rank r contributes recv_bytes[r] bytes from `send`; `recv` receives all contributions
  // concatenated in rank order.
  virtual Status allgatherv(const void* send, void* recv,
                            const std::vector<std::size_t>& recv_bytes, Deadline deadline) = 0;
  virtual Status broadcast(void* buffer, std::size_t bytes, int root, Deadline deadline) = 0;
  // send_bytes[r] bytes go to rank r (consecutive in `send`, rank order); recv_bytes[r]
  // bytes come from rank r (consecutive in `recv`, rank order).
  virtual Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                           const std::vector<std::size_t>& recv_bytes, Deadline deadline) = 0;
  // Reduces `send` (sum of counts elements) across ranks; rank r receives elements
  // [offset_r, offset_r + counts[r]) of the result in `recv`.
  virtual Status reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                               DataType dtype, ReduceOp op, Deadline deadline) = 0;
  virtual Status barrier(Deadline deadline) = 0;

  // Optional zero-copy staging: a buffer of at least `bytes` bytes that allreduce() on
  // this communicator reduces without copying it first (shm: this rank's region of the
  // shared segment). nullptr when the implementation has none of that size. The runtime's
  // fusion packs into it, calls allreduce() on its start, and unpacks from it. Valid until
  // the next call of any method of this communicator other than allreduce() on it.
  virtual void* fusion_buffer(std::size_t bytes) {
    (void)bytes;
    return nullptr;
  }

  // Optional gather/scatter allreduce: reduces the concatenation of `pieces` (every rank
  // passes pieces of the same counts and order) without packing it into one buffer first,
  // scaling as each piece says, in the passes that move the data anyway. Only where
  // reduces_pieces() is true (shm); elsewhere the runtime packs into fusion_buffer() and
  // calls allreduce(). The results are the same bits either way.
  virtual bool reduces_pieces() const { return false; }
  virtual Status allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype,
                                  ReduceOp op, Deadline deadline) {
    (void)pieces, (void)dtype, (void)op, (void)deadline;
    return Status(ErrorCode::kUnsupported, std::string(name()) + " has no allreduce_pieces");
  }

  // Optional: a transport with two allreduce algorithms lets autotune switch between them
  // (AlgorithmSwitch, below); nullptr for one with a single algorithm.
  virtual AlgorithmSwitch* algorithm_switch() { return nullptr; }

  // --- composition: the layers over a base (shm, hier) and process sets -----------------
  // The same calls on every transport that can split; the defaults say kUnsupported, and
  // the layers that need them (hier/, process sets) then refuse with that message.
  //
  // A communicator over this rank's HostGroup, its ranks ordered like this one's and
  // grouped like its topology (so KOLO_TEST_HOSTS applies). Collective over this
  // communicator (every rank asks for the same group). `world_ranks` receives this
  // communicator's rank of each member. Destroy it before this one.
  virtual Status split_by_host(HostGroup group, std::unique_ptr<Communicator>* out,
                               std::vector<int>* world_ranks) {
    (void)group, (void)out, (void)world_ranks;
    return Status(ErrorCode::kUnsupported, std::string(name()) + " cannot split by host");
  }
  // A communicator over `ranks` (distinct, ascending ranks of this communicator; the new
  // rank of ranks[i] is i). Collective over ALL ranks of this communicator, every rank
  // passing the same list; ranks not in the list get nullptr and OK. Destroy it before
  // this one.
  virtual Status subset(const std::vector<int>& ranks, std::unique_ptr<Communicator>* out) {
    (void)ranks, (void)out;
    return Status(ErrorCode::kUnsupported, std::string(name()) + " cannot make subsets");
  }
  // Failure notices over this communicator's ranks (see FailureNotices). Collective.
  virtual Status create_failure_notices(std::unique_ptr<FailureNotices>* out) {
    (void)out;
    return Status(ErrorCode::kUnsupported, std::string(name()) + " has no failure notices");
  }
  // Polled while this communicator's data-plane calls wait (about every 20 ms at most).
  virtual Status set_interrupt(Interrupt interrupt) {
    (void)interrupt;
    return Status(ErrorCode::kUnsupported, std::string(name()) + " cannot be interrupted");
  }

  // --- control plane (negotiation), rooted at rank 0 -----------------------------------
  // Optional: a CycleBell (cycle_bell.h) over memory every rank of this communicator can
  // reach, so the runtime cycles only when some rank has news. nullptr (the default): the
  // runtime cycles on a timer while any rank is busy. Owned by the communicator; its
  // wake_local() may be called from any thread of this rank.
  virtual CycleBell* cycle_bell() { return nullptr; }
  // True when any thread may make this communicator's calls, one at a time (the caller
  // orders each call after the previous one, e.g. under a mutex). The runtime then lets a
  // thread blocked in Handle::wait() run negotiation cycles itself instead of handing each
  // one to the background thread and back. False (the default): one thread only.
  virtual bool calls_from_any_thread() const { return false; }

  // Bitwise AND of `words` across ranks, result on every rank. A rank that does not
  // arrive by the deadline is named in the error on every rank that can know it.
  virtual Status control_and(std::vector<std::uint64_t>& words, Deadline deadline) = 0;
  // Rank 0 receives every rank's message in rank order in `all`; others get nothing.
  virtual Status control_gather(const std::string& mine, std::vector<std::string>* all,
                                Deadline deadline) = 0;
  // Rank 0's `message` replaces `message` on every rank.
  virtual Status control_broadcast(std::string* message, Deadline deadline) = 0;

  // Optional: while this rank waits in a control-plane call for other ranks, the
  // transport calls `observer` about once a second (after the first second) on the
  // waiting thread, with the time waited so far and the ranks still missing (empty when
  // it cannot tell). The coordinator's stall inspector warns from it on its own clock, so
  // a stopped rank (SIGSTOP, a debugger) is reported before the peer timeout. Transports
  // that cannot watch their waits ignore it.
  using WaitObserver = std::function<void(Clock::duration waited, const std::vector<int>& missing)>;
  virtual void set_wait_observer(WaitObserver observer) { (void)observer; }
};

}  // namespace kolo::transport
