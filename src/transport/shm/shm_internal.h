// Internals shared by the shm transport's source files: the ShmCommunicator class.
//
// Not for use outside src/transport/shm/ (and its tests); everything else reaches this
// transport through shm_communicator.h and the Communicator interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/communicator.h"
#include "transport/shm/shm_communicator.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_sync.h"

namespace kolo::transport::shm {

// Owned and used by one thread. Usable until the first peer failure (its own or the
// base communicator's); after that every call fails at once.
class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(std::unique_ptr<Communicator> base, Segment segment);
  // After a peer failure seen here (and not by the base), the base is deliberately not
  // destroyed: MPI's teardown (MPI_Finalize) synchronises with the dead rank and could hang.
  ~ShmCommunicator() override;

  const Topology& topology() const override { return base_->topology(); }
  const char* name() const override { return "shm"; }
  Communicator* base() const { return base_.get(); }
  std::size_t region_bytes() const { return seg_.region_bytes(); }

  Status allreduce(void* buffer, std::size_t count, DataType dtype, ReduceOp op,
                   Deadline deadline) override;
  // See shm_allreduce_staged (shm_communicator.h); `stage` may be null (plain allreduce).
  Status allreduce_staged(void* buffer, std::size_t count, DataType dtype, ReduceOp op,
                          const SliceStage* stage, Deadline deadline);
  void set_rank_names(std::vector<int> names) {
    rank_names_ = names;
    barrier_.set_rank_names(std::move(names));
  }
  // The options it was made with (wrap_in_shm): subset() wraps its members alike.
  void set_options(const ShmOptions& options) { options_ = options; }
  // The base's subset, itself in shared memory when it has more than one rank (every
  // member is on this host). If its segment cannot be made, the plain subset (a warning).
  Status subset(const std::vector<int>& ranks, std::unique_ptr<Communicator>* out) override;
  Status set_interrupt(Interrupt interrupt) override {
    barrier_.set_interrupt(std::move(interrupt));
    return Status::OK();
  }
  // The barrier's control_and and the base's delegated control calls.
  void set_wait_observer(WaitObserver observer) override {
    barrier_.set_wait_observer(observer);
    base_->set_wait_observer(std::move(observer));
  }
  Status allgatherv(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    Deadline deadline) override;
  Status broadcast(void* buffer, std::size_t bytes, int root, Deadline deadline) override;
  Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                   const std::vector<std::size_t>& recv_bytes, Deadline deadline) override;
  Status reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                       DataType dtype, ReduceOp op, Deadline deadline) override;
  Status barrier(Deadline deadline) override;
  void* fusion_buffer(std::size_t bytes) override;
  bool reduces_pieces() const override { return true; }
  Status allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                          Deadline deadline) override;
  CycleBell* cycle_bell() override { return &bell_; }
  // The segment's calls are thread-agnostic; delegated ones are the base's.
  bool calls_from_any_thread() const override { return base_->calls_from_any_thread(); }

  Status control_and(std::vector<std::uint64_t>& words, Deadline deadline) override;
  Status control_gather(const std::string& mine, std::vector<std::string>* all,
                        Deadline deadline) override;
  Status control_broadcast(std::string* message, Deadline deadline) override;

 private:
  // The elements [lo, hi) of a `count`-element buffer that rank `r` reduces: about count/n,
  // cut on 64-byte boundaries.
  struct Slice {
    std::size_t lo, hi;
  };
  Slice slice(std::size_t count, std::size_t es, int r) const;
  // The copy path of allreduce / allreduce_staged (one piece) and allreduce_pieces: the
  // pieces' concatenation in chunks, the other ranks' slices staged in the region, this
  // rank's slice reduced from the inputs into the outputs. `stage` needs a single piece.
  Status copy_path(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                   const SliceStage* stage, Deadline deadline);
  // A chunk of at most kSmallBytes (every rank decides alike, from the chunk's size, which
  // every path cuts alike): the pieces, prescaled, into this rank's slot of the small area
  // (alternating parities); one barrier; every rank reduces all n slots into its outputs
  // and scales them.
  Status small_allreduce(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                         Deadline deadline);
  // Elements of `es` bytes per chunk of the copy paths (see kCopyChunkBudget).
  std::size_t copy_chunk(std::size_t es) const;
  // Whether `count` elements are a single chunk and a small one: the chunk loops' rule,
  // taken before any chunking (the fast path of a small call; regions below kSmallBytes,
  // which only explicit options give, cut such a call into several chunks).
  bool one_small_chunk(std::size_t count, std::size_t es) const;
  // Where this rank's own slice of a chunk is read from and written to when that is not
  // its region: elements [lo, hi) of the chunk, input at `src`, result to `dst` (may be
  // `src`), the input multiplied by `prescale` and the result by postscale / divisor.
  struct OwnSpan {
    std::size_t lo, hi;
    const char* src;
    char* dst;
    double prescale = 1.0, postscale = 1.0, divisor = 1.0;
  };
  // Reduces `count` elements that this rank has at element `base` of its region (each
  // rank says where its own chunk lies, so they may differ); afterwards every region holds
  // the result there, except this rank's own slice when `own` is given: its spans (which
  // cover the slice, in order) are read and written where they say. Two barriers. With a
  // `stage` (at most one span), the slice is reduced whole, staged, then copied out.
  Status reduce_regions(std::size_t count, std::size_t base, DataType dtype, ReduceOp op,
                        const std::vector<OwnSpan>* own, const SliceStage* stage,
                        Deadline deadline);
  // A delegated call's status; a peer failure there breaks this communicator too.
  Status delegated(Status s);
  Status check(const char* op) const;

  std::unique_ptr<Communicator> base_;
  ShmOptions options_;
  std::vector<int> rank_names_;  // how messages name the ranks (empty: as they are)
  Segment seg_;
  Barrier barrier_;
  FutexCycleBell bell_;                       // lazy: control_and nudges
  std::function<void(int)> nudge_;            // control_and's barrier: bell_.nudge
  int parity_ = 0;                            // control area of the next control_and
  int small_parity_ = 0;                      // small area of the next small_allreduce
  std::string base_failure_;                  // set when the base communicator failed
  std::vector<const void*> srcs_;             // scratch: one pointer per rank
  std::vector<char*> chunks_;                 // scratch: where each rank's chunk lies in its region
  std::vector<OwnSpan> spans_;                // scratch: the own slice's spans of a chunk
  std::vector<AllreducePiece> chunk_pieces_;  // scratch: the pieces' parts in a small chunk
};

}  // namespace kolo::transport::shm
