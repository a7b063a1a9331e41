// Hierarchical device collectives (device.h's Collectives) for ranks on several hosts:
// the device's collectives inside each host (NCCL, or the CUDA-IPC path where host-mates
// share a GPU) and a CPU transport across hosts, as Horovod's hierarchical allreduce
// (NCCL inside a node, MPI across).
//
// allreduce: each host reduces on its device (a local allreduce), each local rank copies
// its slice to host memory and reduces it across hosts with the ranks of its local rank
// (one per host, over the CPU transport), copies it back, and the host gathers the slices
// on its device. broadcast: the root's host broadcasts on its device, the root's local
// rank sends it across hosts to its peers, each host broadcasts it on its device. Both
// move across hosts only 1/local_size of the data per rank. allgather(v), reducescatter
// and alltoallv are staged through host memory and run on the CPU transport over all the
// ranks (they are rare on GPUs' hot paths).
//
// The cross-host step is the one place the host waits for the GPU (bounded by the peer
// timeout): the local phase's result must be in host memory before the CPU transport can
// send it, as in Horovod. Every call runs on the thread that owns the communicators (the
// runtime's background thread). A failure of either transport breaks the communicator
// (async_error()); abort() aborts the local device collectives and fails later calls.
//
// Not for: ranks of one host (the device's collectives alone), hosts with different
// numbers of ranks (refused: the slices across hosts must match).
#pragma once

#include <memory>
#include <vector>

#include "device/device.h"

namespace kolo::device::hier {

// Collective over the ranks of `control` (its CPU communicator; every rank calls it with
// the same `host_of`, the host index of each rank): makes the host and cross-host CPU
// communicators as subsets of `control` (which must outlive the collectives), the device
// collectives inside this rank's host with connect_collectives (`options`), and this
// rank's hierarchical collectives on `device`. kInvalidArgument when hosts have different
// numbers of ranks.
Status make_hier_collectives(Device& device, transport::Communicator& control,
                             const std::vector<int>& host_of, const ConnectOptions& options,
                             double timeout_seconds, Deadline deadline,
                             std::unique_ptr<Collectives>* out);

}  // namespace kolo::device::hier
