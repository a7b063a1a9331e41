// The table of transports compiled into this build, and how a job's communicator is made
// from one of them.
//
// A base transport ("local", "mpi", "gloo") makes the communicator of all ranks of the
// job; the layers then compose over ANY base that can split itself by host
// (Communicator::split_by_host, create_failure_notices, set_interrupt): hierarchical
// (shm inside a host, the base across hosts) when there are several hosts, else shm when
// every rank is on one host, as the context's KOLO_HIERARCHICAL and KOLO_SHM say. No base
// entry knows the layers and no layer knows a base.
//
// The control plane (negotiation) and the data path are separate roles of a communicator
// (communicator.h); a data-only backend (NCCL, later) is chosen per response by the
// runtime and never replaces the control plane's communicator made here.
//
// The build decides which entries exist (CMake compiles each optional entry's file or its
// stand-in); no #ifdef in runtime logic.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/communicator.h"

namespace kolo::rendezvous {
class Store;
}

namespace kolo::transport {

// What a transport factory is handed: its slice of the parsed configuration (the KOLO_*
// options of startup/options.def, already validated), of the launch environment, the job's
// rendezvous store and a deadline. The core builds it (core::transport_context,
// startup/launch_env.h); a transport never reads the environment itself. The defaults are
// those of an empty environment.
struct TransportContext {
  // --- configuration ---
  std::string shm = "auto";           // KOLO_SHM: auto, 0 or 1 (see shm/shm_communicator.h)
  std::string hierarchical = "auto";  // KOLO_HIERARCHICAL: auto, 0 or 1 (see hier/)
  // KOLO_FUSION_THRESHOLD: also sizes the shm transport's regions (shm_region_bytes).
  std::int64_t fusion_threshold_bytes = std::int64_t{64} << 20;
  // KOLO_TEST_HOSTS (test-only, 0 = off): fake this many hosts (see MpiOptions::test_hosts).
  int test_hosts = 0;
  // KOLO_PEER_TIMEOUT_SECONDS: the bound a transport that keeps its own timeouts (Gloo)
  // sets on every operation; the runtime's deadlines say the same.
  double peer_timeout_seconds = 60.0;
  // KOLO_GLOO_IFACE: the network interface Gloo binds to (empty: by host_addr).
  std::string gloo_iface;
  // KOLO_GLOO_ALLREDUCE: kolo (kolo's ring) or gloo (gloo::allreduce) on the Gloo transport.
  std::string gloo_allreduce = "kolo";

  // --- launch environment ---
  std::string launcher = "none";  // core::LaunchEnv::launcher: "kolorun", "mpirun", ...
  int rank = 0;                   // as the launcher says (store-based bases take these)
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  // KOLO_HOST_ADDR: the address this process's transport listens on (kolorun sets it to
  // the host's name as it knows it); empty: this host's name.
  std::string host_addr;
  // The job's rendezvous store (startup/job_store.h); nullptr when the job has none (mpirun).
  // Keys a transport writes go under `store_prefix` ("init/<n>": the n-th kolo::init() of
  // this process, the same on every rank), so that init after shutdown meets afresh; keys
  // the launcher writes (launcher/...) are at the store's root.
  std::shared_ptr<rendezvous::Store> store;
  std::string store_prefix;
  // Where the launcher publishes worker exits (kolorun: "<prefix>/exits", a counter, and
  // "<prefix>/exit/<rank>"): "launcher", or an elastic generation's "elastic/<g>/launcher".
  std::string launcher_prefix = "launcher";
  // The bound on creating the communicator (connecting to every peer).
  Deadline deadline = Deadline::max();
};

struct TransportFactory {
  const char* name;  // "local", "mpi", "gloo"
  // Whether this transport can run this job; if not, `why` says why and what to do.
  bool (*available)(const TransportContext& context, std::string* why);
  // Creates the base communicator of all ranks of the job (the layers come after, in
  // create_communicator). Called on the runtime's background thread, which is the only
  // thread that uses the communicator afterwards.
  Status (*create)(const TransportContext& context, std::unique_ptr<Communicator>* out);
};

// Transports of this build, in preference order.
const std::vector<TransportFactory>& transport_table();
// nullptr if `name` is not in the table.
const TransportFactory* find_transport(const std::string& name);

// The job's communicator: `factory`'s base (if available for `context`), then the
// layers (hierarchical or shm) the context asks for. Collective over the job's ranks.
Status create_communicator(const TransportFactory& factory, const TransportContext& context,
                           std::unique_ptr<Communicator>* out);

// --- the entries, one per optional file (CMake compiles each or its stand-in) ---------
std::vector<TransportFactory> mpi_entries();   // mpi/mpi_entry.cc or no_mpi_entry.cc
std::vector<TransportFactory> gloo_entries();  // gloo/gloo_entry.cc or no_gloo_entry.cc

}  // namespace kolo::transport
