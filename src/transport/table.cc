#include "transport/table.h"

#include "transport/mpi/mpi_communicator.h"

namespace kolo::transport {

const std::vector<TransportFactory>& transport_table() {
  static const std::vector<TransportFactory> kTable = {
      {"mpi", &create_mpi_communicator},
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
