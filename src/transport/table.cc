// The transport table of a build with MPI: "mpi" creates the MPI communicator and, when
// every rank is on one host, wraps it in the shared-memory transport (KOLO_SHM: auto, 0,
// 1; see transport/shm/shm_communicator.h).
#include "transport/table.h"

#include "transport/mpi/mpi_communicator.h"
#include "transport/shm/shm_communicator.h"

namespace kolo::transport {
namespace {

Status create_mpi_or_shm(std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> comm;
  KOLO_RETURN_IF_ERROR(create_mpi_communicator(&comm));
  KOLO_RETURN_IF_ERROR(maybe_wrap_in_shm(comm, shm_options_from_env()));
  *out = std::move(comm);
  return Status::OK();
}

}  // namespace

const std::vector<TransportFactory>& transport_table() {
  static const std::vector<TransportFactory> kTable = {
      {"mpi", &create_mpi_or_shm},
  };
  return kTable;
}

const TransportFactory* find_transport(const std::string& name) {
  for (const auto& t : transport_table()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

}  // namespace kolo::transport
