// The hierarchical transport: allreduce for ranks on several hosts, with shared memory
// inside each host and the base transport (Gloo or MPI) across hosts (docs/hierarchical.md has the
// design and numbers).
//
// A HierarchicalCommunicator combines three communicators made from the job's MPI
// communicator: the MPI communicator itself (for every operation it does not implement,
// and the control plane), the ranks of this host (an MPI sub-communicator wrapped in the
// shm transport), and the ranks with this rank's local rank, one per host (an MPI
// sub-communicator). allreduce: a reduce-scatter in shared memory (local rank l ends with
// its host's sum of slice l), an MPI allreduce of slice l across hosts, an allgather in
// shared memory. fusion_buffer() is this rank's shm region, so fused buffers take no copy.
//
// Not for: ranks on one host (the shm transport alone is faster there), hosts with
// different numbers of ranks (plain MPI is used then), CUDA memory, or use from several
// threads (one thread owns it, as the runtime's background thread does).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "transport/communicator.h"
#include "transport/shm/shm_communicator.h"

namespace kolo::transport {

struct HierOptions {
  // KOLO_HIERARCHICAL: "auto" (use it when there are several hosts with several ranks
  // each, the same number on every host, and KOLO_SHM is not "0"), "0" (never), "1"
  // (always; an error when every rank is on one host, the hosts differ in rank count,
  // KOLO_SHM=0, or the shared-memory segments cannot be created).
  std::string mode = "auto";
  // The local segments' options (KOLO_SHM, KOLO_FUSION_THRESHOLD).
  ShmOptions shm;
};

// Replaces `comm` (made by create_mpi_communicator) by a HierarchicalCommunicator over it.
// Collective: every rank of `comm` calls it with the same options. On failure `comm` is
// left unchanged and usable, and every rank gets a non-OK status (the same decision
// everywhere), except after a kPeerFailure, when `comm` is broken.
Status wrap_in_hierarchical(std::unique_ptr<Communicator>& comm, const HierOptions& options);

// The transport table's policy: applies `options.mode` to `comm` (see HierOptions::mode).
// `*wrapped` tells whether `comm` is now hierarchical. In auto mode a setup that fails
// (no room for a segment on some host, ...) logs a warning and leaves `comm` as it is.
Status maybe_wrap_in_hierarchical(std::unique_ptr<Communicator>& comm, const HierOptions& options,
                                  bool* wrapped);

}  // namespace kolo::transport
