// The table of transports compiled into this build.
//
// The runtime picks an entry by name at run time; the build decides which entries exist
// (CMake compiles table.cc with or without the MPI entry). No #ifdef in runtime logic.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/communicator.h"

namespace kolo::transport {

struct TransportFactory {
  const char* name;  // "mpi", ...
  // Creates the communicator of all ranks of the job. Called on the runtime's background
  // thread, which is the only thread that uses the communicator afterwards.
  Status (*create)(std::unique_ptr<Communicator>* out);
};

// Multi-process transports of this build, in preference order.
const std::vector<TransportFactory>& transport_table();
// nullptr if `name` is not in the table.
const TransportFactory* find_transport(const std::string& name);

}  // namespace kolo::transport
