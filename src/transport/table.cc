// The transport table of a build with MPI: "mpi" creates the MPI communicator and then
// picks what runs on top of it, as the TransportContext says:
//   - several hosts with several ranks each: the hierarchical transport (shm inside a
//     host, MPI across; KOLO_HIERARCHICAL: auto, 0, 1; see transport/hier/);
//   - every rank on one host: the shared-memory transport (KOLO_SHM: auto, 0, 1; see
//     transport/shm/shm_communicator.h);
//   - otherwise plain MPI.
// KOLO_TEST_HOSTS (test-only) fakes the grouping of ranks into hosts (mpi_communicator.h).
#include "transport/table.h"

#include "transport/hier/hier_communicator.h"
#include "transport/mpi/mpi_communicator.h"
#include "transport/shm/shm_communicator.h"

namespace kolo::transport {
namespace {

Status create_mpi_family(const TransportContext& context, std::unique_ptr<Communicator>* out) {
  MpiOptions mpi_options;
  mpi_options.test_hosts = context.test_hosts;
  HierOptions hier_options;
  hier_options.mode = context.hierarchical;
  hier_options.shm = shm_options(context.shm, context.fusion_threshold_bytes);
  std::unique_ptr<Communicator> comm;
  KOLO_RETURN_IF_ERROR(create_mpi_communicator(mpi_options, &comm));
  bool hierarchical = false;
  KOLO_RETURN_IF_ERROR(maybe_wrap_in_hierarchical(comm, hier_options, &hierarchical));
  if (!hierarchical) KOLO_RETURN_IF_ERROR(maybe_wrap_in_shm(comm, hier_options.shm));
  *out = std::move(comm);
  return Status::OK();
}

}  // namespace

const std::vector<TransportFactory>& transport_table() {
  static const std::vector<TransportFactory> kTable = {
      {"mpi", &create_mpi_family},
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
