// The "mpi" entry of the transport table (table.h): the MPI base communicator, for jobs
// that mpirun or srun (with MPI) started, and kolorun --mpi.
#include "transport/mpi/mpi_communicator.h"
#include "transport/table.h"

namespace kolo::transport {
namespace {

bool mpi_available(const TransportContext& context, std::string* why) {
  if (context.size > 1 && context.store != nullptr) {
    *why = "this job was started by " + context.launcher +
           " with a rendezvous store, not by mpirun, so its processes are not one MPI job; "
           "use KOLO_TRANSPORT=gloo (or auto), or start the job with mpirun or kolorun --mpi";
    return false;
  }
  return true;
}

Status mpi_create(const TransportContext& context, std::unique_ptr<Communicator>* out) {
  MpiOptions options;
  options.test_hosts = context.test_hosts;
  return create_mpi_communicator(options, out);
}

}  // namespace

std::vector<TransportFactory> mpi_entries() { return {{"mpi", &mpi_available, &mpi_create}}; }

}  // namespace kolo::transport
