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

#include <memory>

#include "common/status.h"
#include "transport/communicator.h"

namespace kolo::transport {

// Creates the communicator of all ranks of MPI_COMM_WORLD. Initializes MPI (requesting
// MPI_THREAD_MULTIPLE, accepting MPI_THREAD_FUNNELED or better) unless the program already
// did; only in the first case does the communicator's destructor call MPI_Finalize, and
// then at most once per process (MPI cannot be initialized again afterwards). Call it on
// the thread that will make every later call. Blocks until every rank has called it.
Status create_mpi_communicator(std::unique_ptr<Communicator>* out);

}  // namespace kolo::transport
