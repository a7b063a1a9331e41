// Scheduling named steps on the workers of a parameter-server job, with TensorFlow's
// ClusterCoordinator semantics: schedule() returns at once, some free worker runs the
// step, a worker that dies loses only its in-flight step, which runs again on another
// (at least once), and a worker that comes back is used again.
//
//   worker task:  WorkerService service(server);
//                 service.register_step("train", [&](const std::string& args, std::string* out)
//                 {...}); server.start(); service.wait_until_stopped(...);
//   chief:        Coordinator c(options);
//                 RemoteValue v = c.schedule("train", args);
//                 KOLO_RETURN_IF_ERROR(c.join(deadline));
//
// Steps are functions registered under a name in every process (they all run the same
// program); only the name and argument bytes travel. One thread per worker in the chief
// takes the next queued step whenever its worker is free (TensorFlow's worker threads).
//
// Failures:
//   - a worker that does not answer (its step's reply, or a ping every
//     `ping_interval_seconds` while the step runs, within `ping_timeout_seconds`), or that
//     the launcher reports dead (`worker_gone`), is marked down: its step goes back to the
//     front of the queue, and the worker is pinged every `rejoin_interval_seconds` until it
//     answers again (a restarted task at the same address), then used again;
//   - a step whose function fails (any error the worker's step returns, e.g. a ps task that
//     did not answer) is fatal, as in TensorFlow: join() returns the first such error, the
//     steps still queued are cancelled (their RemoteValues say so) and the error is cleared;
//   - no worker up for `no_worker_timeout_seconds` fails join() naming every worker.
//
// Not for: what a step does (train layer), the ps tasks' shards (ps_service.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "ps/rpc.h"

namespace kolo::ps {

// A step's function on a worker: argument bytes in, result bytes out.
using StepFunction = std::function<Status(const std::string& args, std::string* result)>;

// Inside a step's function (on the thread that runs it): the step's round, seq / round_size
// with CoordinatorOptions::round_size (synchronous training: the parameters' version the
// step must pull and push), its schedule order without; -1 outside a step.
std::int64_t current_step_round();

// A worker task's side: runs the steps the chief sends. Registers "run", "ping" and
// "stop" on `server` (before it starts). Stop the server before destroying the service
// (its handlers use it).
class WorkerService {
 public:
  explicit WorkerService(RpcServer& server);
  ~WorkerService();
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  // Before the chief's first call (requests for an unknown step fail naming it).
  void register_step(const std::string& name, StepFunction fn);
  // Waits until the chief says stop (the job is done). kPeerFailure when the deadline
  // passes first.
  Status wait_until_stopped(Deadline deadline);
  // Steps this worker ran to completion (tests).
  std::int64_t steps_run() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The chief's handle on one scheduled step's result (tf.distribute's RemoteValue).
class RemoteValue {
 public:
  RemoteValue() = default;
  // Waits for the step (bounded) and gives its result bytes or why it has none:
  // its own error, kCancelled-like kPeerFailure "cancelled: an earlier step failed", or
  // the deadline.
  Status fetch(std::string* result, Deadline deadline = Deadline::max()) const;
  bool ready() const;
  // Which worker ran it (the last attempt), -1 before; and how many attempts it took.
  int worker() const;
  int attempts() const;

  struct State;
  explicit RemoteValue(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

struct CoordinatorOptions {
  std::vector<std::string> worker_endpoints;  // "tcp://host:port", per worker task
  std::vector<std::string> worker_names;      // "/job:worker/replica:0/task:0"
  std::string secret{};
  std::string self = "/job:chief/replica:0/task:0";
  // A step taking longer than this fails as its worker's failure (the worker is marked
  // down and the step retried elsewhere).
  double step_timeout_seconds = 600;
  double ping_interval_seconds = 1;
  double ping_timeout_seconds = 5;  // a worker not answering a ping in this time is down
  double rejoin_interval_seconds = 1;
  // No worker answering for this long fails join() (KOLO_PEER_TIMEOUT_SECONDS).
  double no_worker_timeout_seconds = 60;
  // Synchronous training's rounds: N > 0 runs steps kN .. kN + N - 1 (in schedule order,
  // round k) on N different workers, each worker taking its rounds in order, so that a
  // worker waiting for round k's parameters holds a step of a later round than every step
  // still to run of round k (no deadlock); the step learns its round from
  // current_step_round(). A lost worker's step may then run on any worker. 0: any free
  // worker takes the next step.
  int round_size = 0;
  // Optional, polled about every ping interval: true (with a sentence) when the launcher
  // says worker `index` ended (kolorun's exit notices in the job's store).
  std::function<bool(int index, std::string* why)> worker_gone{};
};

class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();  // stops its threads (does not stop the workers: stop_workers())
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Queues `step` with `args` and gives its RemoteValue in *out. A fatal error of an
  // earlier step not yet reported by join() is returned here instead (and cleared), as
  // TensorFlow's schedule() raises it.
  Status schedule(const std::string& step, std::string args, RemoteValue* out);
  // Waits until every scheduled step has finished; the first fatal error (then cleared).
  Status join(Deadline deadline = Deadline::max());
  // No step queued or running (a fatal error still to report counts as done).
  bool done() const;
  // Tells every worker that answers to end wait_until_stopped() (the job is over).
  void stop_workers(Deadline deadline);

  int num_workers() const;
  // Workers answering now (not marked down).
  int workers_up() const;
  // Times a worker was marked down, and came back (tests, logs).
  std::int64_t worker_failures() const;
  std::int64_t worker_rejoins() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::ps
