// Job: kolorun's own launcher at run time. Starts every worker (worker_plan.h says what
// to run), reads each one's stdout and stderr through its own pipes in one poll() loop,
// passes every line on whole with "[rank] " in front (one write() per line, so lines of
// different workers never splice), publishes each worker's end in the job's store, and
// decides when the job ends.
//
// Failure semantics (docs/launcher.md, "When a worker fails"): kolorun sees each local
// worker's wait status itself, and a remote worker's from the marker its wrapper writes
// (remote_worker.h). After the first failure it collects others for up to a second (the
// dead rank's own end is often reaped after the survivors' errors) and names the cause
// (cause.h: a signal before a non-zero exit, then the earliest), with its last lines;
// the others get `grace_seconds`, then SIGTERM to each worker's process group (for a
// remote worker: its ssh stdin is closed, and its wrapper does the same there), SIGKILL
// `kill_after_seconds` later. SIGINT/SIGTERM/SIGHUP to kolorun stop the job at once the
// same way; a second one kills. If kolorun itself is killed, even by SIGKILL, local
// workers die with it (PR_SET_PDEATHSIG, each in a process group of its own), a guard
// process kills what they left in their groups, and ssh's death closes the remote
// wrappers' stdin. Every wait is bounded except the job itself.
// Not for: building the commands (worker_plan.h) or the --mpi path (supervisor.h).
#pragma once

#include <string>
#include <vector>

#include "launcher/events.h"
#include "launcher/worker_plan.h"
#include "rendezvous/store.h"

namespace kolo::launcher {

struct JobOptions {
  std::vector<WorkerPlan> workers;
  // Set for local workers in their environment, and sent to remote ones on stdin.
  std::string rendezvous_secret;
  // The token of the remote wrappers' exit markers (events.h).
  std::string event_token;
  double grace_seconds = 5;
  double kill_after_seconds = 2;  // SIGTERM -> SIGKILL
  // kolorun's stdout is a terminal (is_terminal in lines.h): a worker's in-place updates
  // ("\r" redraws, e.g. a progress bar) are shown as they come (Console in lines.h);
  // otherwise only the last update of each redrawn line is passed on, as a line.
  bool terminal = false;
  // Where each worker's end is published ("launcher/exit/<rank>", for a ps job's task also
  // "launcher/task_exit/<type>:<index>", then "launcher/exits" += 1; docs/rendezvous.md);
  // nullptr: nowhere.
  rendezvous::Store* store = nullptr;
  // A parameter-server job (above); `workers` are its tasks, the chief first.
  bool parameter_server = false;
  int max_restarts = 0;  // per worker task, in total
};

// The text published for a worker's end: "rank 3 (host b) exited with status 1",
// "rank 3 (host localhost) was killed by signal 9 (SIGKILL)", "rank 3 (host b) exited
// normally"; a ps job's task is named by e.name: "worker 1 (host b) exited normally".
std::string exit_sentence(const WorkerExit& e);

// Runs the job; returns kolorun's exit status: 0 if every worker exited 0, else the
// status of the worker named as the cause (exit code or 128 + signal), else 128 +
// signal when kolorun was interrupted. A parameter-server job: the chief's status (128 +
// signal when kolorun was interrupted before the chief ended by itself).
int run_job(const JobOptions& options);

}  // namespace kolo::launcher
