#include "core/launch_env.h"

#include <climits>
#include <cstdlib>

#include "common/logging.h"

namespace kolo::core {
namespace {

// Reads an integer variable; with `prefix`, trailing text is allowed (Slurm's "2(x3)").
bool get_int(const Env& env, const char* name, int* out, bool prefix = false) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return false;
  char* end = nullptr;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || (*end != '\0' && !prefix)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool from(const Env& env, const char* launcher, const char* rank, const char* size,
          const char* local_rank, const char* local_size, LaunchEnv* out) {
  LaunchEnv e;
  if (!get_int(env, rank, &e.rank) || !get_int(env, size, &e.size)) return false;
  e.launcher = launcher;
  if (local_rank) get_int(env, local_rank, &e.local_rank);
  if (local_size && !get_int(env, local_size, &e.local_size)) e.local_size = e.size;
  *out = e;
  return true;
}

// KOLO_TEST_HOSTS: a number of hosts; anything else is ignored (0: off) with a warning.
int test_hosts(const Env& env) {
  auto it = env.find("KOLO_TEST_HOSTS");
  if (it == env.end() || it->second.empty()) return 0;
  char* end = nullptr;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  if (end != it->second.c_str() && *end == '\0' && v >= 0 && v <= INT_MAX) {
    return static_cast<int>(v);
  }
  KOLO_LOG(kWarning, "launch") << "ignoring KOLO_TEST_HOSTS=" << it->second
                               << ": expected a number of hosts (0: off)";
  return 0;
}

LaunchEnv detect_ranks(const Env& env) {
  LaunchEnv e;
  if (from(env, "kolorun", "KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", &e) ||
      from(env, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
           "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", &e) ||
      from(env, "pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", &e) ||
      from(env, "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, &e)) {
    if (e.launcher == "slurm") {
      // SLURM_NTASKS_PER_NODE may be "2(x3)"; the leading number is this node's count.
      int per_node, nodes;
      if (get_int(env, "SLURM_NTASKS_PER_NODE", &per_node, /*prefix=*/true)) {
        e.local_size = per_node;
      } else if (get_int(env, "SLURM_NNODES", &nodes) && nodes > 0) {
        e.local_size = (e.size + nodes - 1) / nodes;  // best guess without the per-node count
      } else {
        e.local_size = e.size;
      }
    }
    return e;
  }
  return LaunchEnv{};
}

}  // namespace

LaunchEnv detect_launch_env(const Env& env) {
  LaunchEnv e = detect_ranks(env);
  e.test_hosts = test_hosts(env);
  return e;
}

transport::TransportContext transport_context(const Config& config, const LaunchEnv& launch) {
  transport::TransportContext context;
  context.shm = config.shm;
  context.hierarchical = config.hierarchical;
  context.fusion_threshold_bytes = config.fusion_threshold_bytes;
  context.test_hosts = launch.test_hosts;
  context.peer_timeout_seconds = config.peer_timeout_seconds;
  context.launcher = launch.launcher;
  context.rank = launch.rank;
  context.size = launch.size;
  context.local_rank = launch.local_rank;
  context.local_size = launch.local_size;
  return context;
}

Status transport_context(const Env& env, transport::TransportContext* out) {
  Config config;
  KOLO_RETURN_IF_ERROR(parse_config(env, &config));
  *out = transport_context(config, detect_launch_env(env));
  return Status::OK();
}

}  // namespace kolo::core
