// The table of transports compiled into this build.
//
// The runtime picks an entry by name at run time; the build decides which entries exist
// (CMake compiles table.cc with or without the MPI entry). No #ifdef in runtime logic.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/communicator.h"

namespace kolo::transport {

// What a transport factory is handed: its slice of the parsed configuration (the KOLO_*
// options of core/options.def, already validated) and of the launch environment. The core
// builds it (core::transport_context, core/launch_env.h); a transport never reads the
// environment itself. The defaults are those of an empty environment.
struct TransportContext {
  std::string shm = "auto";           // KOLO_SHM: auto, 0 or 1 (see shm/shm_communicator.h)
  std::string hierarchical = "auto";  // KOLO_HIERARCHICAL: auto, 0 or 1 (see hier/)
  // KOLO_FUSION_THRESHOLD: also sizes the shm transport's regions (shm_region_bytes).
  std::int64_t fusion_threshold_bytes = std::int64_t{64} << 20;
  // KOLO_TEST_HOSTS (test-only, 0 = off): fake this many hosts (see MpiOptions::test_hosts).
  int test_hosts = 0;
};

struct TransportFactory {
  const char* name;  // "mpi", ...
  // Creates the communicator of all ranks of the job. Called on the runtime's background
  // thread, which is the only thread that uses the communicator afterwards.
  Status (*create)(const TransportContext& context, std::unique_ptr<Communicator>* out);
};

// Multi-process transports of this build, in preference order.
const std::vector<TransportFactory>& transport_table();
// nullptr if `name` is not in the table.
const TransportFactory* find_transport(const std::string& name);

}  // namespace kolo::transport
