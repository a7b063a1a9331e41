// detect_launch_env: each launcher's variables, in the precedence launch_env.h gives, and
// the store each kind of job meets through.
#include "startup/launch_env.h"

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

bool has(const Env& env, const char* name) {
  auto it = env.find(name);
  return it != env.end() && !it->second.empty();
}

const std::string& value(const Env& env, const char* name) {
  static const std::string kEmpty;
  auto it = env.find(name);
  return it == env.end() ? kEmpty : it->second;
}

bool from(const Env& env, const char* launcher, const char* rank, const char* size,
          const char* local_rank, const char* local_size, LaunchEnv* out) {
  LaunchEnv e;
  if (!get_int(env, rank, &e.rank) || !get_int(env, size, &e.size)) return false;
  e.launcher = launcher;
  e.size_source = std::string(size) + "=" + value(env, size);
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

void slurm_local_size(const Env& env, LaunchEnv* e) {
  // SLURM_NTASKS_PER_NODE may be "2(x3)"; the leading number is this node's count.
  int per_node, nodes;
  if (get_int(env, "SLURM_NTASKS_PER_NODE", &per_node, /*prefix=*/true)) {
    e->local_size = per_node;
  } else if (get_int(env, "SLURM_NNODES", &nodes) && nodes > 0) {
    e->local_size = (e->size + nodes - 1) / nodes;  // best guess without the per-node count
  } else {
    e->local_size = e->size;
  }
}

// The store at `host`:`port`, hosted by this process when `hosts` (it binds the wildcard
// address, or loopback for a loopback host: a one-host job stays off the network).
void set_store(const std::string& host, int port, bool hosts, LaunchEnv* e) {
  e->store_host = host;
  e->store_port = port;
  e->hosts_store = hosts;
  const bool v6 = host.find(':') != std::string::npos;
  if (hosts) {
    e->store_bind = is_loopback_host(host) ? (v6 ? "::1" : "127.0.0.1") : (v6 ? "::" : "0.0.0.0");
  }
}

// KOLO_RENDEZVOUS_ADDR as host and port; kInvalidArgument naming it when malformed.
Status rendezvous_addr(const Config& config, std::string* host, int* port) {
  if (!parse_host_port(config.rendezvous_addr, host, port)) {
    return InvalidArgument("KOLO_RENDEZVOUS_ADDR=" + config.rendezvous_addr +
                           " is not valid: expected host:port (a port from 1 to 65535; an IPv6 "
                           "address in brackets), the address of the job's store");
  }
  return Status::OK();
}

// --- torch.distributed's env:// variables ---

// A number variable of the torch-style set: kInvalidArgument naming it when malformed.
Status torch_int(const Env& env, const char* name, int lo, int* out) {
  const std::string& text = value(env, name);
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || v < lo || v > INT_MAX) {
    return InvalidArgument(std::string(name) + "=" + text + " is not valid: expected an integer" +
                           (lo == 0 ? " >= 0" : " >= 1") +
                           " (torch.distributed's start-up variables, docs/startup.md)");
  }
  *out = static_cast<int>(v);
  return Status::OK();
}

// MASTER_ADDR and MASTER_PORT, both or neither; *found says which.
Status master_addr(const Env& env, std::string* host, int* port, bool* found) {
  *found = false;
  const bool addr = has(env, "MASTER_ADDR"), have_port = has(env, "MASTER_PORT");
  if (!addr && !have_port) return Status::OK();
  if (!addr || !have_port) {
    const char* set = addr ? "MASTER_ADDR" : "MASTER_PORT";
    const char* missing = addr ? "MASTER_PORT" : "MASTER_ADDR";
    return InvalidArgument(std::string(set) + "=" + value(env, set) + " is set but " + missing +
                           " is not: set both, the host and port of the job's store (rank 0 "
                           "hosts it)");
  }
  *host = value(env, "MASTER_ADDR");
  const std::string& port_text = value(env, "MASTER_PORT");
  char* end = nullptr;
  const long p = std::strtol(port_text.c_str(), &end, 10);
  if (end == port_text.c_str() || *end != '\0' || p < 1 || p > 65535) {
    return InvalidArgument("MASTER_PORT=" + port_text +
                           " is not valid: expected a port from 1 to 65535");
  }
  if (host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  *port = static_cast<int>(p);
  *found = true;
  return Status::OK();
}

Status detect_torch(const Env& env, LaunchEnv* e) {
  if (!has(env, "RANK") || !has(env, "WORLD_SIZE")) {
    const char* set = has(env, "RANK") ? "RANK" : "WORLD_SIZE";
    const char* missing = has(env, "RANK") ? "WORLD_SIZE" : "RANK";
    return InvalidArgument(std::string(set) + "=" + value(env, set) + " is set but " + missing +
                           " is not: torch-style start-up needs RANK, WORLD_SIZE, MASTER_ADDR "
                           "and MASTER_PORT in every process");
  }
  KOLO_RETURN_IF_ERROR(torch_int(env, "RANK", 0, &e->rank));
  KOLO_RETURN_IF_ERROR(torch_int(env, "WORLD_SIZE", 1, &e->size));
  if (e->rank >= e->size) {
    return InvalidArgument("RANK=" + value(env, "RANK") +
                           " is not valid with WORLD_SIZE=" + value(env, "WORLD_SIZE") +
                           ": ranks are 0 to " + std::to_string(e->size - 1));
  }
  e->launcher = "torch";
  e->size_source = "WORLD_SIZE=" + value(env, "WORLD_SIZE");
  // torchrun's run id: one per job, the same in every rank.
  if (has(env, "TORCHELASTIC_RUN_ID")) {
    e->job_identity = "TORCHELASTIC_RUN_ID=" + value(env, "TORCHELASTIC_RUN_ID");
  }
  e->local_rank = 0;
  e->local_size = e->size;
  if (has(env, "LOCAL_RANK")) KOLO_RETURN_IF_ERROR(torch_int(env, "LOCAL_RANK", 0, &e->local_rank));
  if (has(env, "LOCAL_WORLD_SIZE")) {
    KOLO_RETURN_IF_ERROR(torch_int(env, "LOCAL_WORLD_SIZE", 1, &e->local_size));
  }
  if (e->local_rank >= e->local_size || e->local_size > e->size) {
    return InvalidArgument("LOCAL_RANK=" + std::to_string(e->local_rank) +
                           " and LOCAL_WORLD_SIZE=" + std::to_string(e->local_size) +
                           " do not fit WORLD_SIZE=" + std::to_string(e->size) +
                           ": expected 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE");
  }
  std::string host;
  int port = 0;
  bool found = false;
  KOLO_RETURN_IF_ERROR(master_addr(env, &host, &port, &found));
  if (found) {
    set_store(host, port, e->rank == 0, e);
  } else if (e->size > 1) {
    return InvalidArgument("RANK=" + value(env, "RANK") +
                           " and WORLD_SIZE=" + value(env, "WORLD_SIZE") +
                           " are set but MASTER_ADDR and MASTER_PORT are not: every process "
                           "needs the host and port of the job's store, which rank 0 hosts");
  }
  return Status::OK();
}

// --- TF_CONFIG ---

// A chief and workers (ps and evaluator tasks are not in the allreduce world): ranks chief
// first, then the workers in order; the store at rank 0's address, hosted there. *matched
// stays false without TF_CONFIG or with an empty cluster (the task runs alone, as in
// TensorFlow; the next launcher's variables count). A ps or evaluator task, and any task
// of a cluster with ps tasks, is refused after the whole spec was validated: that is
// parameter-server training, which ParameterServerStrategy runs without kolo::init().
Status detect_tf_config(const Env& env, LaunchEnv* e, bool* matched) {
  *matched = false;
  if (!has(env, "TF_CONFIG")) return Status::OK();
  TfConfig tf;
  KOLO_RETURN_IF_ERROR(parse_tf_config(value(env, "TF_CONFIG"), &tf));
  const bool ps_role = tf.task_type == "ps" || tf.task_type == "evaluator";
  if (ps_role || !tf.cluster.ps.empty()) {
    const std::vector<std::string>& tasks = *tf.cluster.job(tf.task_type);
    const std::string me = tf.task_type + " " + std::to_string(tf.task_index) +
                           (tasks.empty() ? "" : " (" + tasks[tf.task_index] + ")");
    const std::string why =
        ps_role ? "a " + tf.task_type +
                      " task is not part of kolo::init()'s allreduce world (only chief and "
                      "worker tasks are)"
                : "its cluster has ps tasks (" + std::to_string(tf.cluster.ps.size()) +
                      "), and a parameter-server cluster is not an allreduce job";
    return Status(ErrorCode::kUnsupported,
                  "TF_CONFIG: this task is " + me + ": " + why +
                      "; run parameter-server training through "
                      "kolo::train::ParameterServerStrategy, which serves every role of the "
                      "cluster and does not call kolo::init() (docs/startup.md)");
  }
  if (tf.cluster.empty()) return Status::OK();
  *matched = true;
  e->launcher = "tf_config";
  e->task_type = tf.task_type;
  e->task_index = tf.task_index;
  e->cluster = tf.cluster;
  std::vector<std::string> hosts;
  std::vector<int> ports;
  e->job_identity = "TF_CONFIG cluster {";
  for (const char* type : {"chief", "worker"}) {
    const std::vector<std::string>& tasks = *tf.cluster.job(type);
    if (!tasks.empty()) {
      e->job_identity +=
          std::string(e->job_identity.back() == '{' ? "" : ", ") + "\"" + type + "\": [";
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        e->job_identity += (i ? ", \"" : "\"") + tasks[i] + "\"";
      }
      e->job_identity += "]";
    }
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      e->rank_names.push_back(std::string(type) + " " + std::to_string(i) + " (" + tasks[i] + ")");
      hosts.emplace_back();
      ports.push_back(0);
      parse_host_port(tasks[i], &hosts.back(), &ports.back());  // parse_tf_config checked it
    }
  }
  e->job_identity += "}";
  e->size = static_cast<int>(hosts.size());
  e->size_source = "TF_CONFIG's " + std::to_string(e->size) + " chief and worker tasks";
  e->rank = tf.task_type == "chief" ? tf.task_index
                                    : static_cast<int>(tf.cluster.chief.size()) + tf.task_index;
  // Local ranks: the tasks whose host is written as this one's is.
  e->local_rank = 0;
  e->local_size = 0;
  for (int r = 0; r < e->size; ++r) {
    if (hosts[r] != hosts[e->rank]) continue;
    if (r < e->rank) ++e->local_rank;
    ++e->local_size;
  }
  set_store(hosts[0], ports[0], e->rank == 0, e);
  return Status::OK();
}

// --- in precedence order (launch_env.h) ---

Status detect(const Env& env, const Config& config, LaunchEnv* e) {
  std::string host;
  int port = 0;
  if (from(env, "kolorun", "KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", e)) {
    if (config.rendezvous_addr.empty()) return Status::OK();  // kolorun --mpi
    KOLO_RETURN_IF_ERROR(rendezvous_addr(config, &host, &port));
    set_store(host, port, /*hosts=*/false, e);  // kolorun runs the server
    return Status::OK();
  }
  if (from(env, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
           "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", e) ||
      from(env, "pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", e)) {
    return Status::OK();  // MPI jobs meet through MPI
  }
  bool matched = false;
  KOLO_RETURN_IF_ERROR(detect_tf_config(env, e, &matched));
  if (matched) return Status::OK();
  if (has(env, "RANK") || has(env, "WORLD_SIZE")) return detect_torch(env, e);
  if (from(env, "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, e)) {
    slurm_local_size(env, e);
    bool found = false;
    if (!config.rendezvous_addr.empty()) {
      KOLO_RETURN_IF_ERROR(rendezvous_addr(config, &host, &port));
      found = true;
    } else {
      KOLO_RETURN_IF_ERROR(master_addr(env, &host, &port, &found));
    }
    if (found) set_store(host, port, e->rank == 0, e);
    if (has(env, "SLURM_JOB_ID")) {
      e->job_identity = "SLURM_JOB_ID=" + value(env, "SLURM_JOB_ID") +
                        " SLURM_STEP_ID=" + value(env, "SLURM_STEP_ID");
    }
    return Status::OK();
  }
  *e = LaunchEnv{};
  return Status::OK();
}

}  // namespace

std::string LaunchEnv::rank_name(int r) const {
  if (r >= 0 && r < static_cast<int>(rank_names.size())) return rank_names[r];
  return "rank " + std::to_string(r);
}

std::string LaunchEnv::store_owner() const {
  return launcher == "kolorun" ? "kolorun" : rank_name(0);
}

Status detect_launch_env(const Env& env, LaunchEnv* out) {
  Config config;  // the store's address and secret are options (startup/options.def)
  KOLO_RETURN_IF_ERROR(parse_config(env, &config));
  LaunchEnv e;
  KOLO_RETURN_IF_ERROR(detect(env, config, &e));
  if (e.size > kMaxWorldSize) {
    return InvalidArgument(e.size_source + " is more processes than a kolo job can have (at most " +
                           std::to_string(kMaxWorldSize) +
                           ": the store's start-up waits on one key per rank)");
  }
  if (e.uses_store()) e.secret = config.rendezvous_secret;
  e.test_hosts = test_hosts(env);
  *out = e;
  return Status::OK();
}

std::string auto_transport(const LaunchEnv& launch) {
  if (launch.size <= 1) return "local";
  return launch.uses_store() ? "gloo" : "mpi";
}

bool parse_host_port(const std::string& text, std::string* host, int* port) {
  std::string h, p;
  if (!text.empty() && text.front() == '[') {  // [v6]:port
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return false;
    }
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos) return false;
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
    if (h.find(':') != std::string::npos) return false;  // a bare IPv6 address is ambiguous
  }
  if (h.empty() || p.empty() || p.size() > 5 ||
      p.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const int v = std::stoi(p);
  if (v < 1 || v > 65535) return false;
  *host = h;
  *port = v;
  return true;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
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
  context.host_addr = config.host_addr;
  context.gloo_iface = config.gloo_iface;
  context.gloo_allreduce = config.gloo_allreduce;
  return context;
}

Status transport_context(const Env& env, transport::TransportContext* out) {
  Config config;
  KOLO_RETURN_IF_ERROR(parse_config(env, &config));
  LaunchEnv launch;
  KOLO_RETURN_IF_ERROR(detect_launch_env(env, &launch));
  *out = transport_context(config, launch);
  return Status::OK();
}

}  // namespace kolo::core
