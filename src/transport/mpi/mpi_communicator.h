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
  // KOLO_TEST_HOSTS (test-only; default 0 = off; read by core/launch_env.cc and handed
  // over in the TransportContext): pretend the ranks run on this many hosts,
  // cut into contiguous blocks of ranks (rank r is on host r * hosts / size), instead of
  // asking MPI which ranks share memory. Lets one machine exercise multi-host code paths
  // (the hierarchical transport); the topology's local_* and cross_* fields follow the
  // fake grouping. Must be between 1 and the number of ranks.
  int test_hosts = 0;
};
// As above, with options.
Status create_mpi_communicator(const MpiOptions& options, std::unique_ptr<Communicator>* out);

// Sub-communicators of a communicator made by create_mpi_communicator, for transports
// that combine several (hier/): kHost holds the ranks of this rank's host, kCross the
// ranks with this rank's local rank (one per host), both ordered like `world`'s ranks and
// grouped like world's topology (so KOLO_TEST_HOSTS applies). Collective over `world`
// (every rank asks for the same group). `world_ranks` receives world's rank of each member.
// The sub-communicator names itself "mpi[host]" / "mpi[cross]" in errors, with its own
// rank numbers; destroy it before `world` (whose destructor may finalize MPI).
enum class MpiGroup { kHost, kCross };
Status split_mpi_communicator(Communicator& world, MpiGroup group,
                              std::unique_ptr<Communicator>* out, std::vector<int>* world_ranks);

// --- failure notices between ranks (for hier/) -------------------------------------------
// MPI cannot tell a rank that a peer it waits for has died. A rank that learns of a
// failure some other way (the shm transport sees host-mates die) can announce it here,
// and every rank that polls received() while it waits fails at once instead of at its
// deadline. Owned and used by the communicator's thread; destroy before `world`.
class FailureNotices {
 public:
  virtual ~FailureNotices() = default;
  // Sends `message` to every other rank, once (later calls, and calls after a notice
  // arrived, do nothing); waits at most 100 ms for the sends to leave.
  virtual void announce(const std::string& message) = 0;
  // True once another rank announced a failure; *message is "rank N reported: ...".
  virtual bool received(std::string* message) = 0;
};
// Collective over `world` (made by create_mpi_communicator): a channel over a duplicate of
// it, with a receive posted for the first notice.
Status create_failure_notices(Communicator& world, std::unique_ptr<FailureNotices>* out);

// Called while an MPI communicator's data-plane call waits: returning true (with a reason)
// ends the wait with kPeerFailure and breaks the communicator.
using MpiInterrupt = std::function<bool(std::string* why)>;
// Sets it on `comm`, which must come from create_mpi_communicator or split_mpi_communicator.
Status set_mpi_interrupt(Communicator& comm, MpiInterrupt interrupt);

}  // namespace kolo::transport
