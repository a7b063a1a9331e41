// kolorun's own launcher, the default way it starts a job: the job's rendezvous store and
// secret, the address workers on other hosts reach it at, then every worker (job.h), a
// parameter-server job's tasks (ps_plan.h) or the elastic driver (elastic_driver.h).
// --dry-run prints each worker's command instead.
//
// Not for: the command line (main.cc) or the --mpi path (mpirun_command.h, supervisor.h).
#pragma once

#include <string>
#include <vector>

#include "launcher/elastic_args.h"
#include "launcher/elastic_driver.h"
#include "launcher/job.h"
#include "launcher/mpirun_command.h"

namespace kolo::launcher {

struct OwnLaunch {
  bool dry_run = false;
  std::string rendezvous_addr;  // --rendezvous-addr, "" = choose
  int ssh_port = 0;             // --ssh-port, else KOLO_SSH_PORT (0: ssh's default)
  std::string ssh_identity_file, ssh_config;
};

// Prints "kolorun: <message>" to stderr and returns kolorun's usage-error status (2).
int kolorun_error(const std::string& message);

// kolorun's own path (/proc/self/exe; "kolorun" if unreadable).
std::string self_exe();

// The names under which a host list may mention this machine: its host name (and the
// name before the first dot) and the addresses of its interfaces.
std::vector<std::string> this_host_names();

// Runs `request` with kolorun's own launcher, or the elastic driver when `elastic` is given
// (its hosts are request.hosts). Returns kolorun's exit status.
int run_own(const LaunchRequest& request, const OwnLaunch& own, ElasticOptions* elastic = nullptr);

// Checks an elastic job's options, finds its first hosts and runs it (elastic_driver.h).
int run_elastic_main(const ElasticArgs& a, const OwnLaunch& own);

}  // namespace kolo::launcher
