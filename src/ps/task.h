// A parameter-server job's task lifetimes over the rpc layer: the chief's heartbeat to every
// worker and ps task and its "stop" to them at the end, and a worker's or ps task's serving
// loop, which ends when the chief says stop, or with an error when the chief never came or
// has gone silent (it died without stopping the task, and no launcher stops it).
//
//   chief:  ChiefHeartbeat beat(tasks, secret, self);   // a thread, one beat a second
//           ...;  stop_tasks(tasks, beat.went_silent(), secret, self, deadline);
//   task:   StopSignal stop(server);                    // ps tasks; workers: WorkerService
//           Status s = serve_until_stopped(server, options,
//                                          [&](Deadline d) { return stop.wait_until(d); });
//
// Not for: what the tasks serve (ps_service.h, coordinator.h) or the strategy (src/train).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "ps/rpc.h"

namespace kolo::ps {

struct TaskAddress {
  std::string endpoint;  // "tcp://host:port"
  std::string name;      // "/job:worker/replica:0/task:1"
};

// The chief's heartbeat: one call to each task every second from a thread of its own,
// until destroyed. A task not up yet is fine.
class ChiefHeartbeat {
 public:
  ChiefHeartbeat(std::vector<TaskAddress> tasks, std::string secret, std::string self);
  ~ChiefHeartbeat();
  ChiefHeartbeat(const ChiefHeartbeat&) = delete;
  ChiefHeartbeat& operator=(const ChiefHeartbeat&) = delete;

  // Per task, in the order given: it answered a heartbeat once and then missed two in a
  // row (a second each, 0.5 s to answer: one slow answer is not silence): it died, or hangs.
  std::vector<bool> went_silent() const;

 private:
  void loop();

  const std::vector<TaskAddress> tasks_;
  const std::string secret_, self_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;              // GUARDED_BY(mu_)
  std::vector<bool> went_silent_;  // GUARDED_BY(mu_)
  std::thread thread_;
};

// The chief, at the end: tells every task to stop, all at once, each bounded by `deadline`;
// a task that went silent (`silent[i]`) is given 0.2 s, so that a dead task does not hold
// the chief's exit. A task that is not told is logged (info), not an error.
void stop_tasks(const std::vector<TaskAddress>& tasks, std::vector<bool> silent,
                const std::string& secret, const std::string& self, Deadline deadline);

// A ps task's "stop" method on `server` (registered before it starts): wait_until() says
// whether the chief said stop by then.
class StopSignal {
 public:
  explicit StopSignal(RpcServer& server);
  bool wait_until(Deadline deadline);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

struct ServeOptions {
  std::string self;   // this task's name, for the messages
  std::string chief;  // the chief's name, for the messages
  // KOLO_START_TIMEOUT_SECONDS: how long the chief's first heartbeat may take.
  double start_timeout_seconds = 300;
  // KOLO_PEER_TIMEOUT_SECONDS (or the strategy's timeout): the longest silence after it.
  double peer_timeout_seconds = 60;
};

// Registers the chief's heartbeat on `server`, starts it and serves until `stopped` (asked
// about once a second, with a deadline a second ahead) says the chief said stop: OK. When
// the chief never came or has not been heard from within the bounds: kPeerFailure naming
// both tasks and the bound. An error of the server's start is returned as is. The caller
// stops the server.
Status serve_until_stopped(RpcServer& server, const ServeOptions& options,
                           const std::function<bool(Deadline)>& stopped);

}  // namespace kolo::ps
