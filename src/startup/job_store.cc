// open_job_store and join_job: the job's TCP store (server on the hosting process, a
// client everywhere) and the start-up barrier, with errors that name tasks the way the
// user started them (TF_CONFIG names, MASTER_PORT, ...) and say what to do.
#include "startup/job_store.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/format.h"
#include "common/logging.h"
#include "rendezvous/tcp_store.h"

namespace kolo::core {
namespace {

std::string address(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string store_address(const LaunchEnv& launch) {
  return address(launch.store_host, launch.store_port);
}

std::string seconds_text(double s) { return number_string(s) + " s"; }

// How long a hosting task serves on after start-up failed so that the others read why (they are
// all waiting, so they read it within milliseconds).
constexpr double kTellTheOthersSeconds = 2;

// Where the store's address came from, for "choose another port" hints.
std::string address_source(const LaunchEnv& launch) {
  if (launch.launcher == "tf_config") return "TF_CONFIG: rank 0's address";
  if (launch.launcher == "torch") return "MASTER_ADDR and MASTER_PORT";
  if (launch.launcher == "slurm") return "KOLO_RENDEZVOUS_ADDR (or MASTER_ADDR and MASTER_PORT)";
  return "KOLO_RENDEZVOUS_ADDR";
}

// What a task that cannot reach, or is refused by, a store without a secret should do.
std::string secret_hint(const LaunchEnv& launch) {
  if (!launch.secret.empty() || is_loopback_host(launch.store_host)) return "";
  return "; no KOLO_RENDEZVOUS_SECRET is set, so the store accepts only processes on its own "
         "host: for a job across hosts, set KOLO_RENDEZVOUS_SECRET to the same value in every "
         "task";
}

// How each kind of job's tasks must have been started, for "never arrived".
std::string start_hint(const LaunchEnv& launch) {
  const std::string store = "the store at " + store_address(launch);
  if (launch.launcher == "tf_config") {
    return "check that every task was started with the same TF_CONFIG cluster (and its own "
           "\"task\") and can reach " +
           store;
  }
  if (launch.launcher == "torch") {
    return "check that every rank was started with WORLD_SIZE=" + std::to_string(launch.size) +
           ", its own RANK, and MASTER_ADDR:MASTER_PORT = " + store_address(launch);
  }
  if (launch.launcher == "slurm") {
    return "check that srun started " + std::to_string(launch.size) +
           " tasks (SLURM_NTASKS) and that each can reach " + store;
  }
  return "kolorun started every rank: its output says why a rank did not start";
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

std::string arrived_key(int rank) { return "start/arrived/" + std::to_string(rank); }
std::string aborted_key(int rank) { return "start/aborted/" + std::to_string(rank); }

// The barrier's outcome, decided once for every task: the first task to decide sets it
// with compare_set, and every other task reports what it finds there instead of its own
// view, so the tasks that came all succeed or all fail with one message. A task decides
// "all arrived" (kAllArrived) when its wait saw every arrival key, or why start-up failed
// when it timed out with ranks missing, as "<its name>\n<why>".
constexpr const char* kOutcomeKey = "start/outcome";
constexpr const char* kAllArrived = "ok";
// What the task that decided a failure writes into each missing rank's arrival key to
// wake the waiting tasks at once. It is not a claim: a rank whose key holds it never
// arrived, and it is written only after the failure was decided.
constexpr const char* kWakeValue = "(start-up failed)";

// Which job the store's first task came from (LaunchEnv::job_identity), as kept under
// kJobKey: the identity itself, or for a very large cluster its first part and a hash of
// the whole (FNV-1a, 64 bits).
constexpr const char* kJobKey = "start/job";
constexpr std::size_t kIdentityShown = 2000;
std::string identity_value(const std::string& identity) {
  if (identity.size() <= kIdentityShown) return identity;
  std::uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : identity) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return identity.substr(0, kIdentityShown) + "... (" + std::to_string(identity.size()) +
         " bytes, hash " + hex + ")";
}

// The outcome as task `me` reports it: OK, or the decider's reason (naming the decider
// when it was another task).
Status outcome_status(const std::string& outcome, const std::string& me) {
  if (outcome == kAllArrived) return Status::OK();
  const std::size_t end = outcome.find('\n');
  if (end == std::string::npos) return PeerFailure(outcome);
  const std::string decider = outcome.substr(0, end), why = outcome.substr(end + 1);
  return PeerFailure(decider == me ? why : why + " (reported by " + decider + ")");
}

// Which ranks hold a claim on their arrival key, and which do not.
Status read_arrivals(rendezvous::Store& store, int size, std::vector<int>* arrived,
                     std::vector<int>* missing) {
  for (int r = 0; r < size; ++r) {
    std::string value;
    bool found = false;
    KOLO_RETURN_IF_ERROR(store.try_get(arrived_key(r), &value, &found));
    (found && value != kWakeValue ? arrived : missing)->push_back(r);
  }
  return Status::OK();
}

// Start-up failed (decided by this task when `decided`, which then knows `missing`). The
// decider wakes the waiting tasks by filling the missing ranks' keys (a late task that
// claims one first reads the outcome when its wait ends). The hosting task's exit takes
// the store with it, so it serves on until every other task that came has read the
// outcome (bounded); the others tell it they have.
void after_failure(JobStore& job, const LaunchEnv& launch, bool decided,
                   const std::vector<int>& missing) {
  rendezvous::Store& store = *job.store;
  if (decided) {
    for (int r : missing) {
      std::string actual;
      if (!store.compare_set(arrived_key(r), "", kWakeValue, &actual).ok()) return;
    }
  }
  if (!job.server) {
    (void)store.set(aborted_key(launch.rank), "1");  // the host may stop serving now
    return;
  }
  std::vector<int> arrived, absent;
  if (!read_arrivals(store, launch.size, &arrived, &absent).ok()) return;
  std::vector<std::string> acks;
  for (int r : arrived) {
    if (r != launch.rank) acks.push_back(aborted_key(r));
  }
  (void)store.wait(acks, deadline_after(kTellTheOthersSeconds));  // best effort
}

// "worker 1 (h:1), worker 2 (h:2)"; past 8, "... and 5 more".
std::string names(const LaunchEnv& launch, const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size() && i < 8; ++i) {
    s += (i ? ", " : "") + launch.rank_name(ranks[i]);
  }
  if (ranks.size() > 8) s += " and " + std::to_string(ranks.size() - 8) + " more";
  return s;
}

}  // namespace

Status open_job_store(const LaunchEnv& launch, const Config& config, JobStore* out) {
  if (!launch.uses_store()) {
    return InvalidArgument("open_job_store: " + launch.launcher +
                           " started this process without a store address (an MPI job or a "
                           "single process); see docs/startup.md");
  }
  JobStore job;
  const std::string me = launch.rank_name(launch.rank);
  if (launch.hosts_store) {
    rendezvous::TcpStoreServerOptions server;
    server.host = launch.store_bind;
    server.port = launch.store_port;
    server.secret = launch.secret;
    // The store says which job it serves before any task can reach it, so a foreign
    // task that connects before this one's client is told at once (join_job).
    if (!launch.job_identity.empty()) server.initial[kJobKey] = identity_value(launch.job_identity);
    const Status s = rendezvous::TcpStoreServer::start(server, &job.server);
    if (!s.ok()) {
      std::string why = "start-up: " + me + " hosts the job's store on port " +
                        std::to_string(launch.store_port) + " (from " + address_source(launch) +
                        ") but cannot listen there: " + s.message() +
                        "; is another program, or an earlier run of this job, using the port? "
                        "Give the job a free port";
      if (launch.launcher == "torch") {
        why +=
            " (a launcher that serves its own store on MASTER_PORT, as torchrun's agent may, "
            "cannot share it with kolo)";
      }
      return Status(s.code(), why);
    }
    KOLO_LOG(kInfo, "start") << me << " hosts the job's store on "
                             << address(launch.store_bind, job.server->port());
  }
  rendezvous::TcpStoreOptions client;
  // The hosting process reaches its own server through loopback: a server without a
  // secret refuses its host's external address.
  client.host = !launch.hosts_store                                ? launch.store_host
                : launch.store_bind.find(':') == std::string::npos ? "127.0.0.1"
                                                                   : "::1";
  client.port = launch.store_port;
  client.secret = launch.secret;
  client.connect_timeout_s = config.start_timeout_seconds;
  std::unique_ptr<rendezvous::TcpStore> store;
  const Status s = rendezvous::TcpStore::connect(client, &store);
  if (!s.ok()) {
    std::string why = "start-up: " + me + " cannot use the job's store at " +
                      store_address(launch) + " (hosted by " + launch.store_owner() + ", from " +
                      address_source(launch) + "): " + s.message();
    if (s.code() == ErrorCode::kPeerFailure) {
      why += "; KOLO_START_TIMEOUT_SECONDS=" + number_string(config.start_timeout_seconds) +
             " bounds the wait for " + launch.store_owner() + " to start";
    }
    return Status(s.code(), why + secret_hint(launch));
  }
  if (!launch.job_identity.empty()) {
    // A task of another job that reaches this store (two jobs given one port) must not
    // take a place in this one: the store says which job it serves (the hosting task set
    // it before it listened). On the store's root, not under the prefix kolo::init()
    // gives each start-up's keys.
    const std::string mine = identity_value(launch.job_identity);
    std::string actual;
    const Status c = store->compare_set(kJobKey, "", mine, &actual);
    if (!c.ok()) {
      return Status(c.code(), "start-up: " + me + " cannot use the job's store at " +
                                  store_address(launch) + ": " + c.message());
    }
    if (actual != mine) {
      return InvalidArgument(
          "start-up: " + me + " reached the store at " + store_address(launch) + " (from " +
          address_source(launch) + "), but that store serves another job, started with " + actual +
          "; this task was started with " + mine +
          ": two jobs are using one store address; give each job its own port" +
          (launch.secret.empty() ? " (or each its own KOLO_RENDEZVOUS_SECRET)" : ""));
    }
  }
  job.store = std::move(store);
  *out = std::move(job);
  return Status::OK();
}

Status join_job(JobStore& job, const LaunchEnv& launch, double start_timeout_s) {
  const Deadline deadline = deadline_after(start_timeout_s);
  rendezvous::Store& store = *job.store;
  const std::string me = launch.rank_name(launch.rank);
  const auto lost = [&](const Status& s) {
    return Status(s.code(), "start-up: " + me + " lost the job's store (hosted by " +
                                launch.store_owner() +
                                ") while waiting for the other tasks: " + s.message());
  };
  // Start-up failed before this task could take part: it is told why.
  const auto failed_already = [&]() {
    std::string outcome;
    bool found = false;
    const Status s = store.try_get(kOutcomeKey, &outcome, &found);
    if (!s.ok()) return lost(s);
    return found && outcome != kAllArrived ? outcome_status(outcome, me) : Status::OK();
  };

  std::string actual;
  KOLO_RETURN_IF_ERROR(failed_already());
  // Every task must agree on the size of the job: the first to arrive sets it.
  const std::string size = std::to_string(launch.size);
  KOLO_RETURN_IF_ERROR(store.compare_set("start/size", "", size, &actual));
  if (actual != size) {
    return InvalidArgument("start-up: " + me + " was started for a job of " + size +
                           " tasks, but a task that arrived before it was started for " + actual +
                           "; " + start_hint(launch));
  }
  // One process per rank: a second claim means two tasks were started as the same one.
  const std::string claim = host_name() + " pid " + std::to_string(::getpid());
  KOLO_RETURN_IF_ERROR(store.compare_set(arrived_key(launch.rank), "", claim, &actual));
  if (actual == kWakeValue) {
    // Start-up failed after the check above and this rank's key was filled to wake the
    // others: not a second process.
    KOLO_RETURN_IF_ERROR(failed_already());
  }
  if (actual != claim) {
    return InvalidArgument("start-up: " + me + " was already claimed by another process (" +
                           actual + "): two processes were started as rank " +
                           std::to_string(launch.rank) + "; " + start_hint(launch));
  }

  std::vector<std::string> keys;
  for (int r = 0; r < launch.size; ++r) keys.push_back(arrived_key(r));
  const Status waited = store.wait(keys, deadline);
  if (!waited.ok() && waited.code() != ErrorCode::kPeerFailure) return waited;
  // What this task proposes: all arrived when its wait saw every key (some may be wake-up
  // values: then a failure was decided first and this proposal loses), else the ranks
  // that never arrived (the store's own message names keys, not tasks).
  std::string proposal = kAllArrived;
  std::vector<int> arrived, missing;
  if (!waited.ok()) {
    const Status s = read_arrivals(store, launch.size, &arrived, &missing);
    if (!s.ok()) return lost(s);
    if (!missing.empty()) {
      proposal = me + "\n" + "start-up timed out after " + seconds_text(start_timeout_s) +
                 " (KOLO_START_TIMEOUT_SECONDS): " + names(launch, missing) + " never arrived; " +
                 start_hint(launch) + secret_hint(launch);
    }
  }
  std::string outcome;
  const Status s = store.compare_set(kOutcomeKey, "", proposal, &outcome);
  if (!s.ok()) return lost(s);
  const Status result = outcome_status(outcome, me);
  if (result.ok()) {
    KOLO_LOG(kDebug, "start") << me << ": all " << launch.size << " tasks arrived";
    return result;
  }
  after_failure(job, launch, /*decided=*/outcome == proposal, missing);
  return result;
}

}  // namespace kolo::core
