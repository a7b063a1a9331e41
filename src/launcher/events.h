// Events: the one-line "worker ended" marker a shim writes and the kolorun parent reads.
//
// The marker travels on the worker's stderr through mpirun, so it must survive being
// mixed with other output: it is one whole line, written with one write(), in a fixed
// `KOLO_LAUNCHER_EVENT token=T key=value ...` form. mpirun forwards output in chunks, so
// the marker may arrive spliced after another worker's unfinished line: it is found
// anywhere in a line. T is a random token kolorun makes for each job and passes to the
// shims only (KOLO_LAUNCHER_TOKEN, removed from the program's environment), so the
// program's own output cannot forge a marker. Pure. Not for: reading
// pipes (lines.h) or deciding what to do about a failure (supervisor.h).
#pragma once

#include <string>

namespace kolo::launcher {

inline constexpr const char* kEventPrefix = "KOLO_LAUNCHER_EVENT ";
// The job's marker token, from kolorun to the shims.
inline constexpr const char* kTokenVar = "KOLO_LAUNCHER_TOKEN";

// Whether, and by whom, a worker's shim had been asked to stop (SIGTERM/SIGINT/SIGHUP)
// before its program ended.
enum class Stop {
  kNone,
  // By the process that started the shim (mpirun or its orted): the job is being ended,
  // so the failure is a consequence, not a cause.
  kByJob,
  // By anyone else (a user's kill, a batch system): a cause, like a signal to the program.
  kFromOutside,
};

struct WorkerExit {
  int rank = 0;
  std::string host;
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;     // the signal that killed the program, 0 if it exited
  Stop stop = Stop::kNone;
  // When the shim saw the program end, in microseconds since the epoch (0: unknown).
  long long time_us = 0;
  // No marker came: the worker's shim itself ended (killed, say) and this report is what
  // mpirun said about it (cause.h); exit_code/signal are then the shim's.
  bool shim_lost = false;
  // How messages name it: "" for "rank N"; a parameter-server job's task ("worker 1").
  // Not part of the marker.
  std::string name = {};

  bool failed() const { return signal != 0 || exit_code != 0; }
  // The status a shell would report: the exit code, or 128 + signal.
  int status() const { return signal != 0 ? 128 + signal : exit_code; }
};

// "KOLO_LAUNCHER_EVENT token=T rank=1 host=h exit=3" or "... signal=9", then
// " stopped=job" or " stopped=outside" when the shim had been asked to stop, then
// " t=MICROSECONDS" when the time is known (no newline).
std::string format_exit_event(const WorkerExit& e, const std::string& token);

// Parses a line (without its newline) written by format_exit_event with `token`.
bool parse_exit_event(const std::string& line, const std::string& token, WorkerExit* out);

// Finds a marker with `token` anywhere in `line` (spliced after another worker's
// unfinished output by mpirun); `before` gets the text in front of it.
bool find_exit_event(const std::string& line, const std::string& token, std::string* before,
                     WorkerExit* out);

// A random token for one job (hex).
std::string make_event_token();

// "rank 1 (host h) exited with status 3" / "rank 1 (host h) was killed by signal 9 (Killed)",
// with " after it was stopped from outside the job" for Stop::kFromOutside; for a lost
// shim "rank 1 (host h): its worker shim was killed by signal 9 (Killed) before it
// reported".
std::string describe_exit(const WorkerExit& e);

}  // namespace kolo::launcher
