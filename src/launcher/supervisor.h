// Supervisor: the kolorun parent. Runs mpirun, forwards its output, and decides when the
// job ends.
//
// mpirun's stdout and stderr come through pipes and are passed on line by line; the
// exit markers the worker shims write (events.h) are taken out of stderr. After the
// first marker reporting a failure, kolorun collects reports for up to a second (or until
// every worker has reported; up to 5 s while mpirun ends the job by itself and has yet to
// name the process that made it) and then names the cause (cause.h); the other workers
// then get `grace_seconds` to finish or to report their own errors (a peer timeout, say),
// after which mpirun gets SIGTERM. SIGINT/SIGTERM/SIGHUP to kolorun stop the job the same way.
// On SIGTERM, OpenMPI 4.1's mpirun sends every worker's process group SIGCONT, then
// SIGTERM one second later, then SIGKILL one second after that (odls_base_sigkill_timeout)
// and exits; kolorun SIGKILLs mpirun itself only if it is still there well after that,
// because killing it earlier loses the workers' last lines, which mpirun still holds.
// Every wait is bounded except the job itself. Not for: building the mpirun command
// (mpirun_command.h).
#pragma once

#include <string>
#include <vector>

namespace kolo::launcher {

struct SuperviseOptions {
  std::vector<std::string> mpirun_argv;
  int np = 1;                     // workers expected to report
  double grace_seconds = 5;       // after the first failure, before stopping the others
  double kill_after_seconds = 5;  // SIGTERM -> SIGKILL for mpirun (its own sequence takes 2 s)
  // After every worker reported, mpirun should exit promptly; past this it is stopped.
  double finish_seconds = 10;
  // The token in the workers' exit markers (events.h; also in mpirun's environment as
  // KOLO_LAUNCHER_TOKEN).
  std::string event_token;
  // kolorun's stdout is a terminal (lines.h, is_terminal): the shims' update lines
  // ("\r[rank] TEXT", shim.h) are shown in place (Console, lines.h). Otherwise they are
  // passed on like other lines (the shims send none: KOLO_TERMINAL is not 1 for them).
  bool terminal = false;
  // This job's own directory for OpenMPI's shared-memory segments (MpirunInputs::shm_dir),
  // removed when the job ends; "" = none.
  std::string shm_dir;
};

// Runs the job; returns kolorun's exit status: 0 if every worker exited 0, else the
// status of the worker whose failure caused the job's end (exit code or 128 + signal;
// cause.h), else 128 + signal if kolorun was interrupted, else mpirun's status when it
// failed before the workers reported.
int supervise(const SuperviseOptions& options);

}  // namespace kolo::launcher
