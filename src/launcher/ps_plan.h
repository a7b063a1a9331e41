// PsPlan: what `kolorun --ps N -np M [--evaluator]` runs: one chief, M workers, N ps tasks
// and optionally one evaluator, where each runs (packed over the -H slots in that order,
// as an allreduce job's ranks are), the port each binds, and each one's TF_CONFIG and
// variables.
//
// Pure (the ports come in as numbers: kolorun probes this host's, main.cc), so the
// placement, the TF_CONFIG text and the variables are unit-tested without starting
// anything. Not for: running or supervising the tasks (job.h), parsing TF_CONFIG
// (startup/tf_config.h), or the parameter-server library itself (src/ps, src/train).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "launcher/hosts.h"
#include "launcher/mpirun_command.h"
#include "launcher/worker_plan.h"

namespace kolo::launcher {

// What each task of a ps job gets beyond TF_CONFIG and the store (docs/launcher.md).
inline constexpr const char* kTaskTypeVar = "KOLO_TASK_TYPE";
inline constexpr const char* kTaskIndexVar = "KOLO_TASK_INDEX";
inline constexpr const char* kTfConfigVar = "TF_CONFIG";

// The ports kolorun gives tasks on other hosts (it cannot probe there): a random base in
// [kRemotePortLow, kRemotePortHigh), then base, base + 1, ... for that host's tasks in
// rank order. Below Linux's default ephemeral range (32768-60999), so no outgoing
// connection of that host holds them by chance; a port in use there is reported by the
// task that cannot bind it.
inline constexpr int kRemotePortLow = 20000;
inline constexpr int kRemotePortHigh = 30000;

// Most restarts --max-restarts allows per worker.
inline constexpr int kMaxRestartsLimit = 1000;

// The variables of an allreduce job's workers (KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_*,
// KOLO_CROSS_*, KOLO_HOST_SLOTS): a ps job's tasks do not inherit them from an outer job,
// since kolo::init() would take them for an allreduce world.
bool is_rank_variable(const std::string& name);

struct PsTask {
  std::string type;  // "chief", "worker", "ps" or "evaluator"
  int index = 0;     // within its type
  int rank = 0;      // chief 0, workers 1..M, ps M+1..M+N, the evaluator last
  std::string host;  // as the host list names it; "localhost" for a one-host job
  bool remote = false;
  // Its address in TF_CONFIG: host part and port (port 0 for the evaluator, which is not
  // in the cluster, as in TensorFlow).
  std::string addr_host;
  int port = 0;

  std::string name() const { return type + " " + std::to_string(index); }  // "worker 1"
  bool in_cluster() const { return type != "evaluator"; }
};

// Checks a ps job's command line: at least one worker and one ps (TensorFlow's
// sentences, startup/tf_config.h), a program, enough slots for every task. Requires
// request.ps >= 0.
Status validate_ps_job(const LaunchRequest& request);

// The number of tasks: 1 + workers + ps (+ 1 with the evaluator).
int ps_task_count(const LaunchRequest& request);

// The tasks in rank order, each on its host (packed: the first host's slots first), with
// addr_host set (this host's tasks: `this_host_addr`, the others their -H name) and no
// ports yet. Requires validate_ps_job to pass.
std::vector<PsTask> place_ps_tasks(const LaunchRequest& request,
                                   const std::vector<std::string>& this_host_names,
                                   const std::string& this_host_addr);

// How many ports this host's tasks need (the local tasks in the cluster).
int local_ports_needed(const std::vector<PsTask>& tasks);

// Sets each cluster task's port: this host's tasks take `local_ports` in rank order
// (kolorun found them free here; needs local_ports_needed of them), each other host's
// tasks remote_base, remote_base + 1, ... in rank order.
void assign_ports(const std::vector<int>& local_ports, int remote_base, std::vector<PsTask>* tasks);

// Task i's TF_CONFIG: {"cluster":{"chief":[..],"worker":[..],"ps":[..]},"task":{"type":..,
// "index":..}} (no "evaluator" job: TensorFlow's evaluator is outside the cluster).
std::string ps_tf_config(const std::vector<PsTask>& tasks, size_t i);

// One plan per task, in rank order: the program (or ssh, for another host) with
// TF_CONFIG, KOLO_TASK_TYPE, KOLO_TASK_INDEX, KOLO_RENDEZVOUS_ADDR, KOLO_HOST_ADDR,
// KOLO_LOCAL_SIZE (the job's tasks on its host) and OMP_NUM_THREADS by threads.h's rule.
// No KOLO_RANK/KOLO_SIZE: a ps job is not an allreduce world (kolo::init() refuses it).
std::vector<WorkerPlan> plan_ps_tasks(const LaunchRequest& request, const PlanInputs& in,
                                      const std::vector<PsTask>& tasks);

}  // namespace kolo::launcher
