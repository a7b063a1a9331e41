// ElasticDriver: kolorun's launcher for an elastic job (--min-np, --max-np,
// --host-discovery-script). Workers come and go while the others keep running: the
// driver writes each generation's plan into the job's store, starts new workers for free
// slots, publishes every end, blacklists the host of a failed worker, and stops the
// workers a newer plan left out. The contract with the workers is docs/elastic.md ("The
// driver and the workers: the store protocol"); what it does, "What the driver does".
//
// One thread (kolorun's) runs one poll() loop over the workers' pipes and the signal pipe,
// as job.h does, and shares its process handling (worker_process.h): local workers in
// process groups of their own that die with kolorun, a group guard, remote ones through
// ssh and the --remote-worker wrapper. The discovery script is run from that loop, with a
// time limit. Every wait is bounded: too few slots for --elastic-timeout ends the job, a
// removed worker is stopped, a stop ends in SIGKILL. The job itself is not bounded.
// Not for: the pure decisions (elastic_plan.h), the worker side (src/core), a fixed job
// (job.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/elastic_plan.h"
#include "launcher/worker_plan.h"
#include "rendezvous/store.h"

namespace kolo::launcher {

// What an elastic worker is started with (docs/elastic.md) on top of a kolorun worker's
// variables.
inline constexpr const char* kElasticVar = "KOLO_ELASTIC";
inline constexpr const char* kElasticIdVar = "KOLO_ELASTIC_ID";
inline constexpr const char* kElasticGenerationVar = "KOLO_ELASTIC_GENERATION";
inline constexpr const char* kElasticTimeoutVar = "KOLO_ELASTIC_TIMEOUT_SECONDS";

// How long a removed worker may stay after every member of the newer plan arrived, before
// the driver sends it SIGTERM (it should have left by itself: docs/elastic.md).
inline constexpr double kRemovedGraceSeconds = 10;
// How long one run of the discovery script may take before it is killed (a failed run).
inline constexpr double kDiscoveryTimeoutSeconds = 10;

struct ElasticOptions {
  int min_np = 1;
  int max_np = 0;    // 0: no --max-np (as many workers as there are slots)
  int start_np = 0;  // plan 0's cap where there is no --max-np (-np); 0: none
  // The hosts: fixed (-H, --hostfile, or localhost), or the discovery script's first run.
  std::vector<HostSlots> hosts;
  std::string discovery_script;  // "": the hosts are fixed
  int default_slots = 1;         // --slots
  // The job's store and its workers listen on 127.0.0.1 only (kolorun's choice when every
  // first host is this host under a loopback name and there is no --rendezvous-addr): a
  // host the script adds that is not this host could reach neither, so it gets no workers
  // and a warning says to give --rendezvous-addr.
  bool this_host_only = false;
  double discovery_interval_s = 1;
  double elastic_timeout_s = 600;
  int reset_limit = -1;  // -1: none
  std::optional<Cooldown> cooldown;
  std::function<double()> uniform;  // for the cooldown; default: a random generator

  // What runs, and where (worker_plan.h).
  PlanInputs inputs;
  std::vector<std::string> program;

  std::string rendezvous_secret;
  std::string event_token;
  double grace_seconds = 5;  // after a failure once training is over (job.h)
  double kill_after_seconds = 2;
  bool terminal = false;
  rendezvous::Store* store = nullptr;  // the job's store (required)
};

// Runs the discovery script once (sh -c SCRIPT), at most `timeout_s`, and parses what it
// printed. kInvalidArgument naming the script: it could not run, exited non-zero, was
// killed or timed out (with its last stderr line), or printed a bad line (its number).
Status run_discovery_script(const std::string& script, int default_slots, double timeout_s,
                            std::vector<HostSlots>* out);

// Plan 0 (for --dry-run and the start): as next_plan with nobody alive.
PlanResult first_plan(const ElasticOptions& options);
// The WorkerPlan of `member` at `rank` of generation `generation`.
WorkerPlan elastic_worker_plan(const ElasticOptions& options, const std::vector<PlanMember>& plan,
                               int rank, int generation);

// Runs the job; returns kolorun's exit status: 0 when training ended (a worker in the
// plan exited 0, and every other worker ended without failing), else non-zero after a
// message naming the cause (128 + signal when kolorun was interrupted).
int run_elastic_job(const ElasticOptions& options);

}  // namespace kolo::launcher
