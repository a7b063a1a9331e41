// An elastic job's command line (kolorun --min-np/--max-np/--host-discovery-script ...):
// the flags as parsed, and the checks that turn them into the driver's options
// (elastic_driver.h) and the first hosts, with the message a wrong combination gets.
//
// Pure except for the discovery script's first run (it must work: later failures keep
// the last hosts). Not for: parsing the flags (main.cc, CLI11) or running the job.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "launcher/elastic_driver.h"
#include "launcher/mpirun_command.h"

namespace kolo::launcher {

// As parsed; 0 / -1 / empty: not given.
struct ElasticArgs {
  int np = 0, min_np = 0, max_np = 0;
  std::string discovery_script;
  int slots = 1, reset_limit = -1;
  std::vector<double> cooldown;  // empty, or {LO, HI}
  double elastic_timeout = 600, discovery_interval = 1;
  std::string host_list;  // -H
  bool hosts_given = false;
  std::string hostfile;
  double grace_seconds = 5;
  std::vector<std::string> program;
  // KOLO_ELASTIC_TIMEOUT_SECONDS as kolorun found it, when --elastic-timeout was not given
  // (then it replaces elastic_timeout); empty: not set.
  std::string elastic_timeout_env;
};

// Fills the driver's options (min, max, start size, cooldown, limits, the first hosts:
// the script's first run, -H, --hostfile, or this host with max(np, max) slots) and the
// request (np, the program, the hosts). kInvalidArgument with kolorun's message for a
// combination that cannot run: no -np or --min-np, min above max, -np outside them, a bad
// --slots / --reset-limit / --blacklist-cooldown-range, a timeout or interval outside
// [0.001, 604800] s (also KOLO_ELASTIC_TIMEOUT_SECONDS: the workers' range, which kolorun
// hands them), a script together with
// -H or --hostfile, a script whose first run fails, fixed hosts with fewer than --min-np
// slots, no program.
Status elastic_options_from_args(const ElasticArgs& a, ElasticOptions* e, LaunchRequest* request);

}  // namespace kolo::launcher
