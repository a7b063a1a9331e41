// Process: starting a child with its stdout/stderr on pipes, and receiving signals as
// readable events instead of asynchronous interruptions.
//
// Shared by the worker shim and the kolorun parent, which both run one poll() loop over
// a child's two output pipes and a signal pipe. Linux/POSIX only. Not for: what to do
// with the output or the signals (shim.h, supervisor.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/status.h"

namespace kolo::launcher {

using Clock = std::chrono::steady_clock;

struct SignalEvent {
  int signal = 0;
  pid_t sender = 0;  // si_pid: who sent it (0 for the kernel or the terminal)
};

// Installs handlers for `signals` that write each delivery to a pipe, and returns the
// pipe's (non-blocking) read end for poll(). The handler needs a process-wide file
// descriptor, so this is for one owner per process (main of kolorun or of the shim).
int route_signals_to_pipe(std::initializer_list<int> signals);
// "SIGINT", "SIGTERM", "SIGHUP" (the signals that stop a job), else "a signal": for the
// "received SIGINT, stopping the job" line of the kolorun parent in either mode.
const char* stop_signal_name(int sig);

// Reads the events waiting on `fd` (from route_signals_to_pipe) without blocking.
std::vector<SignalEvent> read_signal_events(int fd);

struct SpawnOptions {
  // Start the child in a process group of its own, so that the terminal's Ctrl-C goes
  // to us alone and we decide how the child is stopped.
  bool own_process_group = false;
  // Signal the child receives when we die (Linux PR_SET_PDEATHSIG); 0 = none.
  int parent_death_signal = 0;
  // Give the child /dev/null as stdin instead of ours.
  bool stdin_from_dev_null = false;
  // Give the child a pipe as stdin, whose write end is Child::in_fd (wins over
  // stdin_from_dev_null).
  bool stdin_pipe = false;
  // Give the child a pseudo-terminal as stdout (raw: no "\r\n" for "\n"), whose master
  // is Child::out_fd, as mpirun does: the C library then line-buffers printf, so each
  // line arrives when it is printed, not at exit (a pipe makes stdout block-buffered).
  // stderr stays a pipe (unbuffered anyway). Default false: a pipe.
  bool stdout_terminal = false;
  // The child's whole environment ("NAME=VALUE" entries); nullptr: ours. Built before
  // fork, because a process with threads may call only async-signal-safe functions
  // between fork and exec. PATH is searched in our own environment.
  const std::vector<std::string>* environment = nullptr;
};

// Exit statuses that a waitpid(-1) loop (reap_workers) took for children it does not own,
// kept for their owner on another thread (the elastic driver's discovery script): note
// one, or take it (true, with its status). At most 1024 are kept (the oldest go).
void note_foreign_exit(pid_t pid, int status);
bool take_foreign_exit(pid_t pid, int* status);

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // read end of the child's stdout
  int err_fd = -1;  // read end of the child's stderr
  int in_fd = -1;   // write end of the child's stdin, with SpawnOptions::stdin_pipe
};

// Starts argv[0] (searched in PATH) with `argv`. Fails, with the errno text, when the
// program cannot be executed; in that case no child is left behind.
Status spawn_piped(const std::vector<std::string>& argv, const SpawnOptions& options, Child* out);

// Starts a guard for `target` (a child that leads its own process group): a small process
// that does nothing while we live and, once we die without end_guard (even by SIGKILL),
// sends `target` SIGTERM and, if it is still there `kill_after_seconds` later, SIGKILLs
// its group. PR_SET_PDEATHSIG on the target is not enough: a stuck mpirun ignores the
// SIGTERM. The guard has a process group of its own, so that killing ours (a test's
// timeout, say) does not take it too. Returns its pid, or -1.
// When `cleanup_dir` is not empty, the guard also removes it (remove_job_dir) once the
// target is gone.
pid_t start_guard(pid_t target, double kill_after_seconds, const std::string& cleanup_dir = "");
// Ends the guard (we are leaving normally) and reaps it.
void end_guard(pid_t guard);

// A guard for many process groups (kolorun's own launcher: one per worker), told about
// each as it starts: a process that does nothing while we live and, once we die without
// end_group_guard (even by SIGKILL), sends each group SIGTERM and, `kill_after_seconds`
// later, SIGKILL. PR_SET_PDEATHSIG on a worker ends only the worker itself, not what it
// started. Groups reach the guard through a pipe whose only writer is us, so our death
// is its end of file.
struct GroupGuard {
  pid_t pid = -1;
  int fd = -1;  // write end of the pipe
};
// Starts the guard (a fork that runs only async-signal-safe code, so threads may exist).
// pid -1 on failure.
GroupGuard start_group_guard(double kill_after_seconds);
// Tells the guard about the group led by `pgid`.
void guard_add(const GroupGuard& guard, pid_t pgid);
// Ends the guard without it touching anything (we are leaving normally) and reaps it.
void end_group_guard(GroupGuard* guard);

// Removes the files in `dir` (not in its subdirectories) and then `dir` itself: a
// directory that this job made for itself (mpirun_command.h, MpirunInputs::shm_dir).
void remove_job_dir(const std::string& dir);

// This process's live children (from /proc: field 4 of /proc/PID/stat is the parent).
std::vector<pid_t> children_of(pid_t parent);

// Ends every child of this process that is still there: for a process that is a child
// sub-reaper (PR_SET_CHILD_SUBREAPER) and whose own children are gone, these are what
// they left behind (a shell's background jobs, a daemon that called setsid() to leave the
// process group). Each gets SIGTERM when first seen and SIGKILL once `term_for` has
// passed; a leftover's own children come to us when it dies and are handled the same
// way, until none is left. Reaps them all. Bounded: nothing survives SIGKILL, and it
// gives up after 5 s regardless.
void end_descendants(Clock::duration term_for);

// Encodes a wait() status the way shells do: exit code, or 128 + signal.
int shell_status(int wait_status);

// Milliseconds from now until `deadline` for poll(): 0 if past, 100 if there is none (the
// callers look again each time round; see process.cc).
int poll_timeout_ms(const Clock::time_point* deadline);

}  // namespace kolo::launcher
