// The MPI transport: kolo's Communicator over an MPI library (OpenMPI 4.1, MPICH).
//
// For: jobs started by mpirun/srun (or kolorun --mpi), CPU buffers, and the runtime's
// control plane (negotiation) in those jobs. Every call is bounded by its deadline: work is
// issued nonblocking and polled, so a dead or hung rank turns into kPeerFailure instead of
// a hang, and control-plane failures name the missing ranks.
//
// Not for: CUDA memory (nccl/), elastic membership (gloo/; MPI cannot shrink a job), or use
// from several threads (one thread creates and uses the communicator, as the runtime's
// background thread does). This header deliberately does not include <mpi.h>, so the
// transport table compiles without MPI's include paths.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/communicator.h"

namespace kolo::transport {

// Creates the communicator of all ranks of MPI_COMM_WORLD. Initializes MPI (requesting
// MPI_THREAD_MULTIPLE, accepting MPI_THREAD_SERIALIZED or better) unless the program
// already did; only in the first case does kolo finalize MPI, at process exit, so that
// communicators can be created again after earlier ones were destroyed (mpi_lifetime.h).
// Call it on the thread that will make every later call. Blocks until every rank has
// called it.
Status create_mpi_communicator(std::unique_ptr<Communicator>* out);

struct MpiOptions {
  // KOLO_TEST_HOSTS (test-only; default 0 = off; read by startup/launch_env.cc and handed
  // over in the TransportContext): pretend the ranks run on this many hosts,
  // cut into contiguous blocks of ranks (rank r is on host r * hosts / size), instead of
  // asking MPI which ranks share memory. Lets one machine exercise multi-host code paths
  // (the hierarchical transport); the topology's local_* and cross_* fields follow the
  // fake grouping. Must be between 1 and the number of ranks.
  int test_hosts = 0;
};
// As above, with options.
Status create_mpi_communicator(const MpiOptions& options, std::unique_ptr<Communicator>* out);

// MPI's answers to the composition calls of communicator.h: split_by_host() and subset()
// give "mpi[host]" / "mpi[cross]" / "mpi[subset]" communicators, which name themselves so
// in errors with their own rank numbers (destroy them before the world communicator,
// whose destructor may finalize MPI); create_failure_notices() a channel over a duplicate
// of the communicator with a receive posted for the first notice; set_interrupt() is
// polled while data-plane calls wait.
using MpiGroup = HostGroup;

}  // namespace kolo::transport
