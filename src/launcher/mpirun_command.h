// MpirunCommand: from kolorun's options to the argv of the mpirun that runs the job.
//
// Pure (the caller supplies the environment, euid and its own path), so that command
// building is unit-tested for every host form without running anything. Not for:
// starting or supervising mpirun (supervisor.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "launcher/hosts.h"

namespace kolo::launcher {

struct LaunchRequest {
  int np = 0;                        // -np
  std::vector<HostSlots> hosts;      // from -H or --hostfile; empty = this host only
  std::string hosts_source;          // "-H a:2,b:2" or "hostfile f", for messages
  std::vector<std::string> program;  // PROGRAM ARGS...
  double grace_seconds = 5;
  // A parameter-server job (ps_plan.h): --ps N (-1: not given, an allreduce job of np
  // workers), --evaluator, --max-restarts R (restarts per failed worker).
  int ps = -1;
  bool evaluator = false;
  int max_restarts = 0;
  bool parameter_server() const { return ps >= 0; }
};

// Checks what the command line alone can tell: np >= 1, a program, enough slots.
Status validate(const LaunchRequest& request);

// What this machine lets one user start (from getrlimit); 0 = no limit to check.
struct MachineLimits {
  long open_files = 0;  // RLIMIT_NOFILE, soft
  long open_files_hard = 0;
  long processes = 0;  // RLIMIT_NPROC, soft (not enforced for root: leave 0)
};

// Workers kolorun starts on one host at most: mpirun (or orted) keeps pipes and a process
// table entry for each, and thousands of processes on one host are a typo, not a job.
inline constexpr int kMaxWorkersPerHost = 4096;
// mpirun holds about 4 descriptors per worker it starts on its own host (the worker's
// stdin, stdout and stderr pipes and an exec-status pipe; measured with OpenMPI 4.1:
// ulimit -n 400 starts 96 workers and fails at 100), plus its own.
inline constexpr int kMpirunFilesPerWorker = 4;
inline constexpr int kMpirunFilesBase = 64;

// Refuses what this machine cannot start, before mpirun is run: more than
// kMaxWorkersPerHost on any host, or on this host (all of a one-host job; of a host list,
// the hosts named in `this_host_names`) more workers than the open-file or process limits
// allow. OpenMPI 4.1's mpirun does not fail at those limits: it hangs for good after
// "The system limit on number of pipes a process can open was reached".
// `starter` ("mpirun", or "kolorun" for its own launcher, which holds about as many
// descriptors per worker) is what the open-file message says needs them.
Status check_machine_limits(const LaunchRequest& request, const MachineLimits& limits,
                            const std::vector<std::string>& this_host_names,
                            const std::string& starter = "mpirun");

// Whether `host` names this machine: localhost, 127.*, or one of `this_host_names`.
bool is_this_host(const std::string& host, const std::vector<std::string>& this_host_names);
// Whether every worker of the job runs on this machine (no host list, or only this host).
bool runs_on_this_host_only(const LaunchRequest& request,
                            const std::vector<std::string>& this_host_names);

struct MpirunInputs {
  bool as_root = false;                    // geteuid() == 0: mpirun refuses root without a flag
  std::string self_exe;                    // absolute path of kolorun (/proc/self/exe)
  std::map<std::string, std::string> env;  // kolorun's environment
  // A private directory (mode 0700) for OpenMPI's shared-memory segments, removed by
  // kolorun when the job ends; "" = OpenMPI's default (/dev/shm). One-host jobs only: the
  // directory exists on this host alone.
  std::string shm_dir;
  // The names under which a host list may mention this machine (is_this_host).
  std::vector<std::string> this_host_names;
};

// How long a shim whose program failed waits for kolorun to stop the job before it
// exits on its own (see shim.h): past the grace period, with room for the SIGTERM.
double shim_linger_seconds(double grace_seconds);

// Names of the variables mpirun must export to the workers with -x: the KOLO_* ones,
// PATH and LD_LIBRARY_PATH, where set. mpirun passes its environment to processes on
// this host but only -x variables to other hosts.
std::vector<std::string> exported_variables(const std::map<std::string, std::string>& env);

// The full mpirun argv (argv[0] = "mpirun"). Requires validate(request) to pass.
std::vector<std::string> mpirun_argv(const LaunchRequest& request, const MpirunInputs& inputs);

// argv as one line a POSIX shell would read back the same way (for --dry-run).
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace kolo::launcher
