// The transport table: the "local" entry (one process), the optional bases (mpi, gloo)
// of this build, and the composition of the layers over whichever base a job uses:
//   - several hosts with several ranks each: the hierarchical transport (shm inside a
//     host, the base across hosts; KOLO_HIERARCHICAL: auto, 0, 1; see transport/hier/);
//   - every rank on one host: the shared-memory transport (KOLO_SHM: auto, 0, 1; see
//     transport/shm/shm_communicator.h);
//   - otherwise the base alone.
#include "transport/table.h"

#include "transport/hier/hier_communicator.h"
#include "transport/inproc/inproc.h"
#include "transport/shm/shm_communicator.h"

namespace kolo::transport {
namespace {

bool local_available(const TransportContext& context, std::string* why) {
  if (context.size <= 1) return true;
  *why = "KOLO_TRANSPORT=local runs one process, but " + context.launcher + " started " +
         std::to_string(context.size) + "; unset KOLO_TRANSPORT to let kolo choose";
  return false;
}

// One inproc rank in a world of its own; the communicator keeps the world alive.
Status local_create(const TransportContext&, std::unique_ptr<Communicator>* out) {
  *out = InprocWorld::single();
  return Status::OK();
}

}  // namespace

const std::vector<TransportFactory>& transport_table() {
  static const std::vector<TransportFactory> kTable = [] {
    std::vector<TransportFactory> table = {{"local", &local_available, &local_create}};
    for (const auto& e : mpi_entries()) table.push_back(e);
    for (const auto& e : gloo_entries()) table.push_back(e);
    return table;
  }();
  return kTable;
}

const TransportFactory* find_transport(const std::string& name) {
  for (const auto& t : transport_table()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

Status create_communicator(const TransportFactory& factory, const TransportContext& context,
                           std::unique_ptr<Communicator>* out) {
  std::string why;
  if (!factory.available(context, &why)) {
    return Status(ErrorCode::kUnsupported, std::string(factory.name) + ": " + why);
  }
  std::unique_ptr<Communicator> comm;
  KOLO_RETURN_IF_ERROR(factory.create(context, &comm));
  if (comm->size() > 1) {
    HierOptions hier_options;
    hier_options.mode = context.hierarchical;
    hier_options.shm = shm_options(context.shm, context.fusion_threshold_bytes);
    bool hierarchical = false;
    KOLO_RETURN_IF_ERROR(maybe_wrap_in_hierarchical(comm, hier_options, &hierarchical));
    if (!hierarchical) KOLO_RETURN_IF_ERROR(maybe_wrap_in_shm(comm, hier_options.shm));
  }
  *out = std::move(comm);
  return Status::OK();
}

}  // namespace kolo::transport
