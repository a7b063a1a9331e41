// The shared-memory transport: ranks on one host exchange CPU buffers through one POSIX
// shared-memory segment instead of through MPI (docs/shm.md has the design and numbers).
//
// A ShmCommunicator wraps a base communicator (MPI) that it uses to bootstrap (passing the
// segment's name) and for every operation it does not implement itself (allgatherv,
// alltoallv, reducescatter, control_gather, control_broadcast). It implements allreduce,
// allreduce_pieces (gather/scatter over many tensors), broadcast, barrier and control_and
// in the segment, a cycle bell for on-demand negotiation, and fusion_buffer(): this
// rank's region of the segment, which allreduce reduces in place with no copy at all.
//
// Not for: ranks on several hosts (the hierarchical transport's job), CUDA memory, or use
// from several threads (one thread owns a communicator, as the runtime's background
// thread does).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/communicator.h"

namespace kolo::transport {

struct ShmOptions {
  // KOLO_SHM: "auto" (wrap when every rank is on this host and there is more than one),
  // "0" (never), "1" (always; an error when the ranks span hosts).
  std::string mode = "auto";
  // Bytes of each rank's data region: the largest allreduce/broadcast moved in one piece
  // and the largest fusion_buffer(). From KOLO_FUSION_THRESHOLD (default 64 MiB); values
  // of 0 or below 1 MiB give 4 MiB; rounded up to 4 KiB. Cut down (with a warning) when
  // /dev/shm is too small.
  std::size_t region_bytes = std::size_t{64} << 20;
  // Bound on the bootstrap's exchanges through the base communicator.
  double bootstrap_timeout_seconds = 60.0;
};

// The options for a KOLO_SHM mode and a KOLO_FUSION_THRESHOLD value (both parsed and
// checked by the core: the transport table hands them over in its TransportContext).
ShmOptions shm_options(const std::string& mode, long long fusion_threshold);
// The region size for a KOLO_FUSION_THRESHOLD value (see ShmOptions::region_bytes).
std::size_t shm_region_bytes(long long fusion_threshold);

// Replaces `comm` by a ShmCommunicator over it. Collective: every rank of `comm` calls it
// with the same options. On failure `comm` is left unchanged and usable, and every rank
// gets a non-OK status (the same decision everywhere).
// `rank_names` (optional, one per rank of `comm`): how messages name the ranks (the
// hierarchical transport passes their global ranks).
Status wrap_in_shm(std::unique_ptr<Communicator>& comm, const ShmOptions& options,
                   const std::vector<int>* rank_names = nullptr);

// --- for the hierarchical transport (hier/) --------------------------------------------
// Runs between the two local phases of shm_allreduce_staged on this rank's slice: `slice`
// holds `count` elements of the ranks' reduced data (this rank's share of the work), and
// what the stage leaves there is what every rank receives for those elements. The stage
// runs on every rank for every chunk, also with count 0, and the slice of local rank l
// is the same on every host (it depends on the count, dtype and rank count only).
using SliceStage = std::function<Status(void* slice, std::size_t count)>;
// allreduce() of `comm` (which must come from wrap_in_shm) with `stage` between its
// reduce-scatter and its allgather. A failed stage breaks `comm` and fails the other
// ranks' calls at once (its message is published in the segment). The same zero-copy
// (fusion_buffer()) and chunked copy paths as allreduce().
Status shm_allreduce_staged(Communicator& comm, void* buffer, std::size_t count, DataType dtype,
                            ReduceOp op, const SliceStage& stage, Deadline deadline);
// A ShmCommunicator's set_interrupt() (communicator.h) is polled while its barriers sleep
// (every 20 ms at most): returning true (with a reason) fails the waiting call like a dead
// rank, and breaks it. The hierarchical transport passes failure notices from other hosts
// through it.

// The transport table's policy: applies `options.mode` to `comm` (see ShmOptions::mode).
// In auto mode a segment that cannot be created logs a warning and leaves `comm` as it
// is; with mode "1" that is an error.
Status maybe_wrap_in_shm(std::unique_ptr<Communicator>& comm, const ShmOptions& options);

}  // namespace kolo::transport
