// The "gloo" entry of the transport table (table.h): the Gloo base communicator, for jobs
// whose processes meet through a rendezvous store (kolorun, TF_CONFIG, torch-style env).
#include "rendezvous/memory_store.h"
#include "transport/gloo/gloo_communicator.h"
#include "transport/table.h"

namespace kolo::transport {
namespace {

bool gloo_available(const TransportContext& context, std::string* why) {
  if (context.size <= 1 || context.store != nullptr) return true;
  *why = "this job of " + std::to_string(context.size) + " processes (started by " +
         context.launcher +
         ") has no rendezvous store for Gloo to meet through; start it with kolorun, or use "
         "KOLO_TRANSPORT=mpi under mpirun";
  return false;
}

Status gloo_create(const TransportContext& context, std::unique_ptr<Communicator>* out) {
  GlooOptions options;
  options.rank = context.rank;
  options.size = context.size;
  options.host_addr = context.host_addr;
  options.iface = context.gloo_iface;
  options.library_allreduce = context.gloo_allreduce == "gloo";
  options.test_hosts = context.test_hosts;
  options.timeout_seconds = context.peer_timeout_seconds;
  options.deadline = context.deadline;
  options.launcher_notices = context.launcher == "kolorun";
  options.launcher_prefix = context.launcher_prefix;
  if (!context.store_prefix.empty()) options.key_prefix = context.store_prefix + "/gloo/world";
  std::shared_ptr<rendezvous::Store> store = context.store;
  if (store == nullptr) {
    // One process: a store of its own (nobody else needs to find it).
    store = std::make_shared<rendezvous::MemoryStore>();
  }
  return create_gloo_communicator(options, std::move(store), out);
}

}  // namespace

std::vector<TransportFactory> gloo_entries() { return {{"gloo", &gloo_available, &gloo_create}}; }

}  // namespace kolo::transport
