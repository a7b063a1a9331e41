// kolorun's command line: its options (CLI11) and --help, parsed into a plain value that
// main.cc dispatches on. Part of the kolorun executable, not of kolo_launcher, so that
// CLI11 stays out of the library.
//
// Not for: checking what the options mean together (main.cc, elastic_args.h,
// mpirun_command.h's validate), kolorun's own environment variables (kolorun_env.h) or
// the two hidden modes (--worker-shim, --remote-worker), which main.cc takes before this.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/elastic_args.h"

namespace kolo::launcher {

struct CommandLine {
  // Set when kolorun is to exit at once with it: 0 after --help, 2 after a usage error
  // (CLI11 has printed either); the fields below are then not to be used.
  std::optional<int> exit_status;

  std::optional<int> np;  // -np, when given
  std::optional<int> ps;  // --ps, when given: a parameter-server job
  bool evaluator = false;
  int max_restarts = 0;
  std::optional<std::string> hosts;  // -H, when given (even empty: that is an error)
  std::string hostfile;
  bool mpi = false;  // --mpi (KOLO_LAUNCHER_MODE=mpi is kolorun_env.h's)
  bool dry_run = false;
  std::string rendezvous_addr, ssh_identity_file, ssh_config;
  int ssh_port = 0;  // 0: not given
  double grace_seconds = 5;

  // An elastic job: --min-np, --max-np or --host-discovery-script was given. `elastic`
  // holds every option an elastic job reads, except elastic_timeout_env (kolorun_env.h).
  bool is_elastic = false;
  ElasticArgs elastic;
  bool elastic_timeout_given = false;  // --elastic-timeout
  // Without is_elastic: the first of the other elastic options given ("--slots"), which
  // kolorun refuses; else "".
  std::string elastic_only_option;

  // What follows kolorun's options, as CLI11 left it: PROGRAM ARGS..., after a "--" when
  // one was given.
  std::vector<std::string> rest;
};

// Parses kolorun's arguments (argv[1..]; mpirun's spelling -np is taken too).
CommandLine parse_command_line(int argc, char** argv);

}  // namespace kolo::launcher
