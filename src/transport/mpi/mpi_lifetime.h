// MPI's lifetime in a process where kolo initializes it (internal to the MPI transport).
//
// kolo::init() may follow kolo::shutdown() (Horovod's tests do this), but MPI cannot be
// initialized again once finalized. So MPI stays up from the first communicator to the
// end of the process: MPI_Init_thread and MPI_Finalize both run on one thread of their
// own (the standard wants them on the same thread), started with the first communicator
// and asked to finalize by an exit handler. Finalizing is skipped while a communicator is
// still alive (deliberately leaked after a peer failure) or after one broke: MPI_Finalize
// synchronises with every rank and would hang on a dead one.
// A program that lets kolo initialize MPI should not finalize it (kolo checks, and skips
// its own MPI_Finalize if it did). Since kolo's thread is MPI's main thread, kolo needs
// MPI_THREAD_SERIALIZED or better from the library (OpenMPI and MPICH give MULTIPLE).
// Not for: programs that initialize MPI themselves (kolo then never finalizes it).
#pragma once

#include "common/status.h"

namespace kolo::transport::mpi {

// Initializes MPI (MPI_THREAD_MULTIPLE requested) on the lifetime thread unless this
// process already did; `*provided` is the thread level MPI gave. Thread-safe.
Status ensure_mpi_initialized(int* provided);
// Communicators count themselves, so the exit handler knows whether MPI is still in use.
void communicator_created();
void communicator_destroyed(bool broken);

}  // namespace kolo::transport::mpi
