// The CUDA-IPC path: device collectives (device.h's Collectives) among ranks of one host
// that share a GPU, where NCCL refuses them ("Duplicate GPU detected"), or that have no
// NCCL between their GPUs. Device memory moves as the shm transport moves host memory
// (docs/shm.md): every rank exports a region of device memory (Device::allocate_shared,
// cudaIpcGetMemHandle) that the others open, and kolo's kernels (Device::copy, reduce,
// convert) do the reductions: for an allreduce each rank copies its input into its
// region, folds its slice of every region in rank order (the same bits on every rank),
// and copies the other ranks' reduced slices out.
//
// Ordering without the host waiting for the GPU: after each phase's writes a rank records
// its shared event, the ranks pass a host barrier in a shared-memory segment (they wait
// for each other's enqueueing only), then each stream waits for the peers' events (a
// wait takes the record made before the barrier). Each region has two halves used in
// turn, so a phase that writes a half is ordered after every peer's reads of it by the
// previous use's barrier and event waits: an allreduce takes two barriers per chunk,
// broadcast, allgather(v), reducescatter and alltoallv one. Collectives larger than a half
// go in chunks.
//
// Failures: a rank that dies or stops is found by the barrier (its liveness lock and the
// peer timeout, as the shm transport's) and named by rank; the first failure is published
// in the segment, so every rank's next barrier fails at once quoting it; after it every
// call fails with it (async_error()). abort() breaks the barrier for every rank. Device
// work enqueued before a failure waits only on records made before a barrier, so it
// completes.
//
// Not for: ranks on several hosts (NCCL, or the hierarchical path), host memory (the shm
// transport).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "device/device.h"
#include "transport/shm/shm_segment.h"

namespace kolo::device::ipc {

struct IpcOptions {
  // Bytes of each half of this rank's region (rounded up to a multiple of 8; at least 8
  // per rank). Every rank passes the same value.
  std::size_t half_bytes = std::size_t{16} << 20;
  // The bound of each barrier (KOLO_PEER_TIMEOUT_SECONDS's role).
  double timeout_seconds = 60;
  // How messages name the ranks (names[r] for rank r; empty: r).
  std::vector<int> rank_names{};
};

// Collective over the `size` ranks of `segment` (transport::shm::Segment: rank 0 created
// it, the others opened it, and every rank joined it before any rank calls this; its
// regions are not used): this rank's collectives on
// `device`, which must outlive them. Exchanges the regions' and events' handles through
// the segment, bounded by `deadline`. Destroy the collectives once the streams' work that
// uses them has been enqueued (they wait, bounded, for it to complete before they free
// their region).
Status make_ipc_collectives(Device& device, transport::shm::Segment segment, int rank, int size,
                            const IpcOptions& options, Deadline deadline,
                            std::unique_ptr<Collectives>* out);

}  // namespace kolo::device::ipc
