// Stand-in for mpi/mpi_entry.cc in a build without MPI: the table has no "mpi" entry.
#include "transport/table.h"

namespace kolo::transport {

std::vector<TransportFactory> mpi_entries() { return {}; }

}  // namespace kolo::transport
