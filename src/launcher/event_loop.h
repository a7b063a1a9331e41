// The launcher's one way of waiting: a poll() step over the descriptors a loop watches this
// time round, until the earliest of its deadlines, and how long its loops read a child's
// output after the child ended.
//
// Every process of the launcher runs one such loop on one thread: kolorun's own job
// (job.cc), its elastic driver (elastic_driver.cc), its --mpi parent (supervisor.cc), the
// mpirun shim (shim.cc) and the remote wrapper (remote_worker.cc); the discovery script's
// run (elastic_workers.cc) is a small one. Each time round a loop builds a PollSet (its
// children's output pipes, its signal pipe, stdin), waits until one is ready or its
// earliest deadline (Deadlines), then reaps its children and acts on the deadlines that
// passed. Every wait is bounded, with or without a deadline (poll_timeout_ms, process.h).
//
// Not for: what a loop does with lines, signals or ends (job.h, supervisor.h, shim.h, ...),
// or starting processes (process.h).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "launcher/lines.h"
#include "launcher/process.h"

struct pollfd;

namespace kolo::launcher {

// How long a child's output is still read after it exited (a worker, the program under
// the shim, mpirun, the remote wrapper's program): something it left behind (a background
// process, ssh to other hosts) may hold its pipes open for good; read what it flushes, but
// no longer than this. Shorter once the job is being stopped.
inline constexpr auto kDrainAfterExit = std::chrono::seconds(2);
// kolorun's own loops (job.cc, elastic_driver.cc) once they are stopping the job.
inline constexpr auto kDrainWhenStopping = std::chrono::milliseconds(500);
// The mpirun shim once the job is being stopped: mpirun sends SIGKILL one second after its
// SIGTERM, so the shim drains for less (and kills leftovers at once) to be done before that.
inline constexpr auto kShimDrainWhenStopped = std::chrono::milliseconds(250);
// The remote wrapper once kolorun stopped its worker, as the shim's. kolorun stops a remote
// worker by closing ssh's stdin and SIGKILLs ssh kill_after_seconds (2 s, job.h) later,
// which loses whatever the wrapper has not yet written; only after ssh exited does its own
// kDrainWhenStopping read what ssh left in the pipe. So this drain, after a program that
// exits on its SIGTERM, ends well inside those 2 s. (It was kKillAfter / 8, seconds(2) / 8,
// which is 0 s in whole seconds: a stopped worker's last lines, still in the pipe or from
// something it left behind, were lost.)
inline constexpr auto kRemoteDrainWhenStopped = std::chrono::milliseconds(250);

// The earliest of a loop's deadlines, those that are set and still matter.
class Deadlines {
 public:
  // Takes `d` into account when it is set and `active`.
  void consider(const std::optional<Deadline>& d, bool active = true) {
    if (active && d && (!earliest_ || *d < *earliest_)) earliest_ = d;
  }
  // None when nothing was taken into account: the wait is then only bounded.
  const std::optional<Deadline>& earliest() const { return earliest_; }

 private:
  std::optional<Deadline> earliest_;
};

// The descriptors one loop step waits on, each with what to do when poll() reports it
// (readable, hung up or in error: the handler's read tells which). Built afresh each time
// round, as pipes close and children come and go; may wait again. Owned by one thread.
class PollSet {
 public:
  PollSet();
  ~PollSet();
  PollSet(const PollSet&) = delete;
  PollSet& operator=(const PollSet&) = delete;

  // Watches `fd` for input; `on_ready` runs after a wait in which poll() reported it.
  void add(int fd, std::function<void()> on_ready);
  // Watches the pipes of `output` that are still open; after a wait, what arrived on them
  // goes to the sinks (OutputReader::service). `output` must outlive the wait.
  void add(OutputReader* output, LineSplitter::Sink on_out, LineSplitter::Sink on_err,
           LineSplitter::Sink on_out_redraw = nullptr, LineSplitter::Sink on_err_redraw = nullptr);
  // Watches a signal pipe (route_signals_to_pipe): `on_signal` gets each signal that
  // arrived but SIGCHLD, which only wakes the loop (every loop reaps each time round).
  void add_signals(int signal_fd, std::function<void(const SignalEvent&)> on_signal);

  // Waits until a descriptor is ready or `wake` passes, at most poll_timeout_ms(nullptr)
  // (100 ms) when there is no deadline, then runs the handlers of the descriptors poll()
  // reported, in the order they were added. A signal that interrupts poll() (EINTR) does
  // not end the wait early, nor extend it. Internal("poll: <error>") when poll() fails
  // otherwise (bad descriptors); no handler runs then.
  Status wait(const std::optional<Deadline>& wake);

 private:
  std::vector<struct pollfd> fds_;
  // Each gets every entry of fds_ and reads those it added.
  std::vector<std::function<void(const std::vector<struct pollfd>&)>> handlers_;
};

}  // namespace kolo::launcher
