// Shim: what mpirun runs on each worker slot (`kolorun --worker-shim -- PROGRAM ARGS`).
//
// It turns mpirun's rank variables and kolorun's layout into the KOLO_* variables,
// runs the program with its output on pipes, prefixes every line with "[rank] " (a line
// redrawn with "\r" becomes its last update; with KOLO_TERMINAL=1 each update is also
// passed on as a line "\r[rank] TEXT", which kolorun shows in place), and when
// the program ends ends whatever it left behind (the shim is a child sub-reaper, so even a
// daemon that called setsid() is found) and writes one exit marker (events.h) to stderr.
// If the program failed,
// the shim then lingers: it waits for the job to be stopped (SIGTERM from mpirun, sent
// when kolorun decides) or for its linger time to pass, and only then exits with the
// program's status. Exiting non-zero at once would let mpirun kill the other workers
// before they could report their own errors. Not for: deciding when the job stops
// (supervisor.h); it only reports.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "launcher/layout.h"

namespace kolo::launcher {

struct ShimOptions {
  double linger_seconds = 35;
  std::vector<std::string> program;
};

// Parses the arguments after argv[0]: "--worker-shim [--linger-seconds=S] -- PROGRAM ...".
Status parse_shim_args(const std::vector<std::string>& args, ShimOptions* out);

// This worker's ranks from mpirun's OMPI_COMM_WORLD_RANK/SIZE and KOLO_HOST_SLOTS (all
// on one host when that is unset). `warning` is set when mpirun's own local rank/size
// disagree with the layout, i.e. mpirun placed ranks differently than kolorun expected.
Status ranks_from_env(const std::map<std::string, std::string>& env, WorkerRanks* out,
                      std::string* warning);

// The KOLO_* variables for `r` (KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK, ...).
std::map<std::string, std::string> rank_variables(const WorkerRanks& r);

// Runs the worker; returns the exit status for the shim process.
int run_shim(const ShimOptions& options);

}  // namespace kolo::launcher
