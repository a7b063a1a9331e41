// Executor: runs one negotiated response on this rank through the communicator.
//
// Implements tensor semantics on top of the byte-level collectives: copying input to
// output, prescale, averaging and postscale, the op's identity (zero for sums) for joined
// ranks, output allocation for allgather/alltoall/reducescatter. Not for: deciding what runs
// (controller.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "core/entry.h"
#include "core/message.h"
#include "transport/communicator.h"

namespace kolo::core {

// When each phase of an execution began and ended, for the timeline (timeline.h):
// pack = [pack_start, comm_start), communicate = [comm_start, comm_end), unpack =
// [comm_end, unpack_end).
struct ExecTimes {
  using Clock = std::chrono::steady_clock;
  Clock::time_point pack_start, comm_start, comm_end, unpack_end;
};

// `entry` is null when this rank did not submit the operation because it has joined
// (allreduce and barrier only): it then takes part with the op's identity (zero for sums,
// one for products, the largest value for min, the smallest for max). `times` may be null.
Status execute_response(transport::Communicator& comm, const Response& response, Entry* entry,
                        transport::Deadline deadline, ExecTimes* times = nullptr);

// What an allgather or alltoall (r.op) moves on this rank of `size`: the bytes it sends to
// (alltoall) and receives from each rank, and the result's shape. An alltoall also sets
// entry.handle->received_splits. The host executor and the device path (device_path.h)
// share it, so both give one result.
struct ExchangeLayout {
  std::vector<std::size_t> send, recv;
  Shape out_shape;
};
ExchangeLayout exchange_layout(const Response& r, Entry& entry, int size, int me);

// The packing buffer of fused allreduces: the communicator's zero-copy buffer when it
// has one that large (shm), else a private buffer that grows to the largest fused size
// used so far (never beyond KOLO_FUSION_THRESHOLD). Owned by the background thread.
class FusionBuffer {
 public:
  void* get(transport::Communicator& comm, std::size_t bytes);
  // Scratch for the pieces of an unpacked fused allreduce (kept to reuse its memory).
  std::vector<transport::AllreducePiece>& pieces() { return pieces_; }

 private:
  std::vector<std::byte> own_;
  std::vector<transport::AllreducePiece> pieces_;
};

// One member of a fused allreduce: the negotiated response and this rank's entry (null
// when this rank has joined: it contributes the op's identity).
struct FusedItem {
  const Response* response;
  Entry* entry;
};

// The pieces of a fused allreduce of `items` for Communicator::allreduce_pieces() (the
// tensors themselves, scaled on the way), or false when they must be packed instead: a
// joined rank (its identity), memory this rank cannot read, compression, or tensors whose
// memory overlaps another's (a tensor's own input and output may be the same buffer).
bool allreduce_pieces_of(const std::vector<FusedItem>& items, int size,
                         std::vector<transport::AllreducePiece>* pieces);

// Runs compatible allreduces (plan_fusion()) as one: each tensor is copied into the
// buffer and prescaled there, the buffer is reduced once, and each result is scaled
// (average, postscale) in the buffer and copied to its output. The returned status is
// the collective's (a failure applies to every item); `item_status` gets each item's
// own outcome when the collective succeeded.
Status execute_fused(transport::Communicator& comm, const std::vector<FusedItem>& items,
                     FusionBuffer& buffer, transport::Deadline deadline,
                     std::vector<Status>* item_status, ExecTimes* times = nullptr);

}  // namespace kolo::core
