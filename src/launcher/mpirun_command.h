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
};

// Checks what the command line alone can tell: np >= 1, a program, enough slots.
Status validate(const LaunchRequest& request);

struct MpirunInputs {
  bool as_root = false;                    // geteuid() == 0: mpirun refuses root without a flag
  std::string self_exe;                    // absolute path of kolorun (/proc/self/exe)
  std::map<std::string, std::string> env;  // kolorun's environment
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
