// RemoteWorker: what ssh runs on another host for one worker of kolorun's own launcher
// (`kolorun --remote-worker -- PROGRAM ARGS`, see worker_plan.h for the command).
//
// It reads the job's secrets from its stdin (worker_plan.h, secrets_header: they must not
// be on a command line), starts the program in a process group of its own with its
// output on pipes, and passes each line on whole (unprefixed: kolorun adds "[rank] ").
// With KOLO_TERMINAL=1 (kolorun is on a terminal) it also passes on a line's in-place
// updates as they come, "\r" TEXT without newline, and the line they end as "\r" LINE
// "\n", which kolorun's own splitter reads back as updates and one line (lines.h).
// Its stdin stays a pipe from kolorun through ssh: when it closes (kolorun ended the job,
// or died, even by SIGKILL, taking ssh with it) the wrapper sends the program's process
// group SIGTERM and, 2 s later, SIGKILL, so that no worker outlives its kolorun. When the
// program ends it writes one exit marker (events.h) to stderr, so that kolorun learns
// the exit status or the signal (ssh reports a remote signal only as status 255).
// Not for: deciding anything about the job (job.h).
#pragma once

#include <string>
#include <vector>

namespace kolo::launcher {

// Runs the wrapper; `args` are the arguments after "--remote-worker". Returns its exit
// status (the program's, or 128 + signal).
int run_remote_worker(const std::vector<std::string>& args);

}  // namespace kolo::launcher
