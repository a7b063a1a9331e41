// Launch environment: which launcher started this process, the rank it assigned, where the
// job's rendezvous store is (for jobs that meet through one), the TF_CONFIG cluster, and the
// test hook that fakes hosts (KOLO_TEST_HOSTS); and the TransportContext made from it and
// the Config, which is all a transport factory learns of the process's environment.
//
// kolo::init() uses it to choose a transport (a job of one process needs none), to
// cross-check the transport's ranks and to hand the transport its context; job_store.h
// opens the job's store from it. Pure: it reads an environment map (a KOLO_TEST_HOSTS that
// is not a number is ignored with a warning). docs/startup.md is the user's view.
//
// Not for: opening the store or waiting for the other tasks (job_store.h), or the KOLO_*
// options themselves (config.h; the store's address and secret are read through it).
#pragma once

#include <string>
#include <vector>

#include "startup/config.h"
#include "startup/tf_config.h"
#include "transport/table.h"

namespace kolo::core {

struct LaunchEnv {
  // Who started the process: "kolorun", "mpirun" (OpenMPI), "pmi" (MPICH's hydra),
  // "tf_config", "torch" (MASTER_ADDR/RANK/WORLD_SIZE: torchrun, Kubernetes operators),
  // "slurm" (srun) or "none" (a single process).
  std::string launcher = "none";
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  // Where `size` came from, for messages: "WORLD_SIZE=8", "KOLO_SIZE=4", or TF_CONFIG's
  // task count ("" for a single process).
  std::string size_source;
  // KOLO_TEST_HOSTS (test-only; 0 = off): pretend the ranks run on this many hosts, so one
  // machine exercises multi-host code paths (see transport::MpiOptions::test_hosts).
  int test_hosts = 0;

  // The job's store (uses_store()): its address as the tasks reach it, whether this
  // process runs the server (rank 0 of a job started without kolorun), the address that
  // server binds (0.0.0.0, or 127.0.0.1 when store_host is a loopback name or address;
  // "::" / "::1" for IPv6), and the job secret (KOLO_RENDEZVOUS_SECRET; never print it).
  std::string store_host;
  int store_port = 0;  // 0: no store (an MPI job or a single process)
  bool hosts_store = false;
  std::string store_bind;
  std::string secret;

  // What every task of this job shares and another job's tasks reaching the same store
  // address would not, for start-up's foreign-job check (job_store.h): "TF_CONFIG cluster
  // {...}" (its chief and worker addresses), "TORCHELASTIC_RUN_ID=...", or
  // "SLURM_JOB_ID=... SLURM_STEP_ID=..."; "" when the launcher gives nothing of the kind
  // (kolorun: its store has a secret of its own for each job).
  std::string job_identity;

  // TF_CONFIG only: this task's type ("chief" or "worker") and index, and the cluster.
  std::string task_type;
  int task_index = 0;
  TfCluster cluster;
  // TF_CONFIG only: each rank's name for messages, "chief 0 (host:1234)", "worker 1
  // (host:2345)"; empty for the other launchers (rank_name() says "rank 3").
  std::vector<std::string> rank_names;

  // Whether the job's processes meet through a store (kolorun's own launcher, TF_CONFIG,
  // torch-style, Slurm with a store address).
  bool uses_store() const { return store_port > 0; }
  // "worker 1 (host:2345)" for TF_CONFIG, else "rank 1".
  std::string rank_name(int r) const;
  // Who runs the store server, for messages: "kolorun" or rank_name(0).
  std::string store_owner() const;
};

// Reads the launcher's variables from `env` into *out. Precedence (the first that is
// present wins; the others are not read, so a stale TF_CONFIG in a shell does not matter
// under mpirun):
//   1. KOLO_RANK/KOLO_SIZE (kolorun; a store job when KOLO_RENDEZVOUS_ADDR is set)
//   2. OMPI_COMM_WORLD_* (OpenMPI's mpirun)
//   3. PMI_RANK/PMI_SIZE (MPICH's hydra)
//   4. TF_CONFIG with a non-empty cluster
//   5. RANK or WORLD_SIZE, with MASTER_ADDR/MASTER_PORT (torch.distributed's env://)
//   6. SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun): a store job when
//      KOLO_RENDEZVOUS_ADDR, or else MASTER_ADDR and MASTER_PORT, name a store, which task
//      0 hosts; without them an MPI job, as before.
// The rank variables of 1, 2, 3 and 6 are skipped when incomplete or not numbers (the next
// launcher is tried). An invalid TF_CONFIG, torch-style variables that are incomplete or
// out of range, a bad store address, or a KOLO_* option that does not parse are
// kInvalidArgument naming the variable and its value; TF_CONFIG roles kolo does not run
// yet (ps, evaluator) are kUnsupported, after the whole spec was validated. A world above
// kMaxWorldSize is kInvalidArgument naming its variable and value, before anything is
// allocated for it.
Status detect_launch_env(const Env& env, LaunchEnv* out);

// The most processes a job can have: the store's start-up waits on one key per rank, and a
// request carries at most 65536 keys (rendezvous/tcp_store_wire.h, kMaxKeys).
inline constexpr int kMaxWorldSize = 65536;

// The transport KOLO_TRANSPORT=auto means for this job: "local" for one process, "gloo"
// for a store job, "mpi" otherwise (mpirun, MPICH, Slurm with MPI, kolorun's --mpi path).
std::string auto_transport(const LaunchEnv& launch);

// "host:port" (or "[v6addr]:port") into host and port (1 to 65535); false if malformed.
bool parse_host_port(const std::string& text, std::string* host, int* port);
// Whether `host` names this host's loopback: "localhost", 127.x.y.z, "::1".
bool is_loopback_host(const std::string& host);

// The slice of `config` and `launch` a transport factory is handed.
transport::TransportContext transport_context(const Config& config, const LaunchEnv& launch);
// The same from an environment (parse_config, then detect_launch_env): for programs that
// create a transport without a runtime (the transports' check programs).
Status transport_context(const Env& env, transport::TransportContext* out);

}  // namespace kolo::core
