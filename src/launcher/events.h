// Events: the one-line "worker ended" marker a shim writes and the kolorun parent reads.
//
// The marker travels on the worker's stderr through mpirun, so it must survive being
// mixed with other output: it is one whole line, written with one write(), in a fixed
// `KOLO_LAUNCHER_EVENT key=value ...` form. Worker output cannot forge it because the
// shim prefixes every line the program writes with "[rank] ". Pure. Not for: reading
// pipes (lines.h) or deciding what to do about a failure (supervisor.h).
#pragma once

#include <string>

namespace kolo::launcher {

inline constexpr const char* kEventPrefix = "KOLO_LAUNCHER_EVENT ";

struct WorkerExit {
  int rank = 0;
  std::string host;
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;     // the signal that killed the program, 0 if it exited
  // The shim had been asked to stop (SIGTERM/SIGINT/SIGHUP, from mpirun or anyone) before
  // the program ended: the failure is then a consequence, not a cause.
  bool stopped = false;

  bool failed() const { return signal != 0 || exit_code != 0; }
  // The status a shell would report: the exit code, or 128 + signal.
  int status() const { return signal != 0 ? 128 + signal : exit_code; }
};

// "KOLO_LAUNCHER_EVENT rank=1 host=h exit=3" or "... signal=9", plus " stopped=1" when
// the shim had been asked to stop (no newline).
std::string format_exit_event(const WorkerExit& e);

// Parses a line (without its newline) written by format_exit_event.
bool parse_exit_event(const std::string& line, WorkerExit* out);

// "rank 1 (host h) exited with status 3" / "rank 1 (host h) was killed by signal 9 (Killed)".
std::string describe_exit(const WorkerExit& e);

}  // namespace kolo::launcher
