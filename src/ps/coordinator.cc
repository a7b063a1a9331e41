// The chief's step scheduler and the workers' step service (coordinator.h).
//
// Threads in the chief: one per worker. Each waits for its worker to answer a ping, then
// takes the queue's first step and sends it ("run"); while the reply is awaited (on a
// helper thread that owns the call) it pings the worker every ping interval and asks the
// launcher's notices. A worker that stops answering is marked down and its step goes back
// to the front of the queue; the abandoned call ends by its own deadline and its late
// reply is ignored (the helper thread holds what it uses). A step's own error travels in
// the reply's fields ("step_code", "step_message"), so it is never mistaken for the
// worker's death.
#include "ps/coordinator.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "common/logging.h"
#include "ps/task.h"
#include "ps/task_wire.h"

namespace kolo::ps {

// ---------------------------------------------------------------- RemoteValue

struct RemoteValue::State {
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  std::string result;
  int worker = -1;
  int attempts = 0;

  void finish(Status s, std::string r) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      done = true;
      status = std::move(s);
      result = std::move(r);
    }
    cv.notify_all();
  }
};

Status RemoteValue::fetch(std::string* result, Deadline deadline) const {
  if (!state_) return InvalidArgument("RemoteValue: this value was never scheduled");
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_until(lock, deadline, [&] { return state_->done; })) {
    return PeerFailure("RemoteValue: the step has not finished by the deadline");
  }
  if (result != nullptr) *result = state_->result;
  return state_->status;
}

bool RemoteValue::ready() const {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

int RemoteValue::worker() const {
  if (!state_) return -1;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->worker;
}

int RemoteValue::attempts() const {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->attempts;
}

// ---------------------------------------------------------------- WorkerService

// This process's identity as a worker: a task restarted at the same address answers pings
// with another, so the chief knows the step it sent the old one is lost.
std::string new_incarnation() {
  return std::to_string(::getpid()) + "." +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

thread_local std::int64_t t_current_round = -1;

struct WorkerService::Impl {
  const std::string incarnation = new_incarnation();
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, StepFunction> steps;  // GUARDED_BY(mu)
  bool stopped = false;                       // GUARDED_BY(mu)
  std::atomic<std::int64_t> steps_run{0};

  Status run(const Message& req, Message* reply) {
    std::string name;
    KOLO_RETURN_IF_ERROR(req.fields.get("step", &name));
    StepFunction fn;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = steps.find(name);
      if (it != steps.end()) fn = it->second;
    }
    std::int64_t round = -1;
    KOLO_RETURN_IF_ERROR(req.fields.get_or("round", -1, &round));
    Status s;
    std::string result;
    t_current_round = round;
    if (!fn) {
      s = InvalidArgument("no step named '" + name +
                          "' is registered on this worker (every process of the job must "
                          "register the same steps before the chief schedules them)");
    } else {
      const std::string empty;
      try {
        s = fn(req.blobs.empty() ? empty : req.blobs[0], &result);
      } catch (const std::exception& e) {
        s = Internal(std::string("the step '") + name + "' threw: " + e.what());
      } catch (...) {
        s = Internal("the step '" + name + "' threw something that is not a std::exception");
      }
    }
    t_current_round = -1;
    reply->fields.set("step_code", static_cast<std::int64_t>(s.code()));
    reply->fields.set("step_message", s.message());
    if (s.ok()) {
      reply->blobs.push_back(std::move(result));
      steps_run.fetch_add(1);
    }
    return Status::OK();
  }
};

WorkerService::WorkerService(RpcServer& server) : impl_(std::make_unique<Impl>()) {
  Impl* impl = impl_.get();
  server.handle(task_wire::kRun, [impl](const Message& req, Message* reply, Deadline) {
    return impl->run(req, reply);
  });
  server.handle(task_wire::kPing, [impl](const Message&, Message* reply, Deadline) {
    reply->fields.set("incarnation", impl->incarnation);
    return Status::OK();
  });
  server.handle(task_wire::kStop, [impl](const Message&, Message*, Deadline) {
    {
      std::lock_guard<std::mutex> lock(impl->mu);
      impl->stopped = true;
    }
    impl->cv.notify_all();
    return Status::OK();
  });
}

WorkerService::~WorkerService() = default;

std::int64_t current_step_round() { return t_current_round; }

void WorkerService::register_step(const std::string& name, StepFunction fn) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->steps[name] = std::move(fn);
}

Status WorkerService::wait_until_stopped(Deadline deadline) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->cv.wait_until(lock, deadline, [&] { return impl_->stopped; })) {
    return PeerFailure("the chief did not end the job in time (this worker waited for its stop)");
  }
  return Status::OK();
}

std::int64_t WorkerService::steps_run() const { return impl_->steps_run.load(); }

// ---------------------------------------------------------------- Coordinator

namespace {

struct Closure {
  std::int64_t seq = 0;  // schedule order
  std::string step;
  std::string args;
  std::shared_ptr<RemoteValue::State> state;
  bool retried = false;  // it ran on a worker that was lost
};

// One "run" call in flight, owned by the thread that makes it.
struct Call {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  Message reply;
};

}  // namespace

struct Coordinator::Impl {
  CoordinatorOptions options;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Closure> queue;               // GUARDED_BY(mu)
  int running = 0;                         // GUARDED_BY(mu): steps sent and not yet finished
  Status fatal;                            // GUARDED_BY(mu): the first step error, until reported
  bool stopping = false;                   // GUARDED_BY(mu)
  std::vector<bool> up;                    // GUARDED_BY(mu)
  std::vector<std::string> down_why;       // GUARDED_BY(mu)
  Deadline all_down_since = Clock::now();  // GUARDED_BY(mu)
  std::atomic<std::int64_t> failures{0}, rejoins{0};
  std::vector<std::thread> threads;
  std::int64_t next_seq = 0;  // GUARDED_BY(mu)
  // Synchronous rounds not yet finished: which workers hold or ran one of their steps.
  struct Round {
    std::vector<bool> taken;
    int finished = 0;
  };
  std::map<std::int64_t, Round> rounds;  // GUARDED_BY(mu)

  // The first queued step worker w may take: any, or with rounds one of a round it has
  // no step of. REQUIRES(mu)
  std::deque<Closure>::iterator pick(int w) {
    const int k = options.round_size;
    for (auto it = queue.begin(); it != queue.end(); ++it) {
      // A lost worker's step may go to a worker of its round: without it the round could
      // never finish while that worker is away.
      if (k <= 0 || it->retried) return it;
      auto r = rounds.find(it->seq / k);
      if (r == rounds.end() || !r->second.taken[static_cast<std::size_t>(w)]) return it;
    }
    return queue.end();
  }
  void mark_round(const Closure& c, int w, bool taken) {  // REQUIRES(mu)
    if (options.round_size <= 0) return;
    Round& r = rounds[c.seq / options.round_size];
    r.taken.resize(up.size(), false);
    r.taken[static_cast<std::size_t>(w)] = taken;
  }
  void round_step_done(const Closure& c) {  // REQUIRES(mu)
    if (options.round_size <= 0) return;
    auto r = rounds.find(c.seq / options.round_size);
    if (r != rounds.end() && ++r->second.finished >= options.round_size) rounds.erase(r);
  }

  std::shared_ptr<RpcClient> make_client(int w) const {
    RpcClientOptions o;
    o.endpoint = options.worker_endpoints[w];
    o.secret = options.secret;
    o.peer = options.worker_names[w];
    o.self = options.self;
    return std::make_shared<RpcClient>(o);
  }

  bool stopping_now() {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  }

  // Waits `seconds` or until stopping; false when stopping.
  bool pause(double seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return !cv.wait_until(lock, deadline_after(seconds), [&] { return stopping; });
  }

  void set_up(int w, bool is_up, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (up[w] == is_up) return;
    up[w] = is_up;
    down_why[w] = why;
    const bool any_up = std::find(up.begin(), up.end(), true) != up.end();
    if (!any_up) all_down_since = Clock::now();
    cv.notify_all();
  }

  // Pings worker w: "" and its incarnation in *incarnation when it answers, else why not.
  std::string ping(RpcClient& client, std::string* incarnation) {
    Message req{task_wire::kPing, {}, {}}, pong;
    Status s = client.call(req, &pong, deadline_after(options.ping_timeout_seconds));
    if (s.ok()) s = pong.fields.get("incarnation", incarnation);
    return s.ok() ? "" : s.message();
  }

  // The launcher's word on worker w, a failed ping, or another process answering at its
  // address (it was restarted: the step sent to the old one is lost), as a reason it is
  // down ("" if it is up and the same).
  std::string check_alive(int w, RpcClient& client, const std::string& incarnation) {
    std::string why;
    if (options.worker_gone && options.worker_gone(w, &why)) {
      return why.empty() ? "the launcher reports it ended" : why;
    }
    std::string now;
    why = ping(client, &now);
    if (!why.empty()) return why;
    if (now != incarnation) return "it was restarted: a new process answers at its address";
    return "";
  }

  void worker_loop(int w) {
    std::shared_ptr<RpcClient> client = make_client(w);
    bool ever_up = false;
    std::string incarnation;  // of the process that answered the last ping
    while (!stopping_now()) {
      // Down (or not yet seen): ping until it answers.
      bool is_up;
      {
        std::lock_guard<std::mutex> lock(mu);
        is_up = up[w];
      }
      if (!is_up) {
        if (ping(*client, &incarnation).empty()) {
          if (ever_up) {
            rejoins.fetch_add(1);
            KOLO_LOG(kWarning, "ps") << options.worker_names[w] << " answers again: it takes steps";
          }
          ever_up = true;
          set_up(w, true, "");
        } else {
          if (!pause(options.rejoin_interval_seconds)) return;
        }
        continue;
      }
      Closure c;
      {
        std::unique_lock<std::mutex> lock(mu);
        auto it = queue.end();
        cv.wait(lock, [&] {
          if (stopping) return true;
          it = pick(w);
          return it != queue.end();
        });
        if (stopping) return;
        c = std::move(*it);
        queue.erase(it);
        ++running;
        mark_round(c, w, true);
      }
      {
        std::lock_guard<std::mutex> lock(c.state->mu);
        c.state->worker = w;
        ++c.state->attempts;
      }
      std::string down = run_on(w, client, incarnation, c);
      if (!down.empty()) {
        failures.fetch_add(1);
        KOLO_LOG(kWarning, "ps") << options.worker_names[w] << " is down (" << down
                                 << "); its step '" << c.step << "' runs again elsewhere";
        {
          std::lock_guard<std::mutex> lock(mu);
          --running;
          mark_round(c, w, false);  // it did not take part
          c.retried = true;
          queue.push_front(std::move(c));
        }
        set_up(w, false, down);
        client = make_client(w);  // a fresh connection for the rejoin pings
      }
    }
  }

  // Runs c on worker w. Returns "" when the step finished (well or with its own error),
  // else why the worker is taken for down.
  std::string run_on(int w, const std::shared_ptr<RpcClient>& client,
                     const std::string& incarnation, Closure& c) {
    auto call = std::make_shared<Call>();
    Message req{task_wire::kRun, {}, {c.args}};
    req.fields.set("step", c.step);
    req.fields.set("round", options.round_size > 0 ? c.seq / options.round_size : c.seq);
    const Deadline step_deadline = deadline_after(options.step_timeout_seconds);
    std::thread([call, client, req = std::move(req), step_deadline] {
      Message reply;
      Status s = client->call(req, &reply, step_deadline);
      {
        std::lock_guard<std::mutex> lock(call->mu);
        call->done = true;
        call->status = std::move(s);
        call->reply = std::move(reply);
      }
      call->cv.notify_all();
    }).detach();
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(call->mu);
        if (call->cv.wait_for(lock, seconds_duration(options.ping_interval_seconds),
                              [&] { return call->done; })) {
          break;
        }
      }
      if (stopping_now()) return "the coordinator is stopping";
      if (Clock::now() >= step_deadline) {
        return "its step did not finish within " +
               std::to_string(static_cast<long long>(options.step_timeout_seconds)) + " s";
      }
      const std::string why = check_alive(w, *client, incarnation);
      if (!why.empty()) return why;
    }
    if (!call->status.ok()) return call->status.message();
    std::int64_t code = 0;
    std::string message;
    Status s = call->reply.fields.get("step_code", &code);
    if (s.ok()) s = call->reply.fields.get("step_message", &message);
    Status step = s.ok() ? Status(static_cast<ErrorCode>(code), message) : s;
    if (!step.ok()) {
      step = Status(step.code(), "the step '" + c.step + "' failed on " + options.worker_names[w] +
                                     ": " + step.message());
    }
    std::string result;
    if (step.ok() && !call->reply.blobs.empty()) result = std::move(call->reply.blobs[0]);
    finish(c, step, std::move(result));
    return "";
  }

  void finish(Closure& c, const Status& s, std::string result) {
    std::vector<Closure> cancelled;
    {
      std::lock_guard<std::mutex> lock(mu);
      --running;
      round_step_done(c);
      if (!s.ok() && fatal.ok()) {
        fatal = s;
        cancelled.assign(std::make_move_iterator(queue.begin()),
                         std::make_move_iterator(queue.end()));
        queue.clear();
      }
    }
    c.state->finish(s, std::move(result));
    for (Closure& q : cancelled) {
      q.state->finish(PeerFailure("cancelled: an earlier step failed (" + s.message() + ")"), "");
    }
    cv.notify_all();
  }

  std::string down_list() const {  // REQUIRES(mu)
    std::string out;
    for (std::size_t w = 0; w < up.size(); ++w) {
      if (!out.empty()) out += "; ";
      out += options.worker_names[w] + ": " + (down_why[w].empty() ? "not answering" : down_why[w]);
    }
    return out;
  }
};

Coordinator::Coordinator(CoordinatorOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  const std::size_t n = impl_->options.worker_endpoints.size();
  impl_->options.worker_names.resize(n);
  for (std::size_t w = 0; w < n; ++w) {
    if (impl_->options.worker_names[w].empty()) {
      impl_->options.worker_names[w] = "/job:worker/replica:0/task:" + std::to_string(w);
    }
  }
  impl_->up.assign(n, false);
  impl_->down_why.assign(n, "not answered yet");
  for (std::size_t w = 0; w < n; ++w) {
    impl_->threads.emplace_back(
        [impl = impl_.get(), w] { impl->worker_loop(static_cast<int>(w)); });
  }
}

Coordinator::~Coordinator() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    for (Closure& c : impl_->queue) {
      c.state->finish(PeerFailure("cancelled: the coordinator was destroyed"), "");
    }
    impl_->queue.clear();
  }
  impl_->cv.notify_all();
  for (std::thread& t : impl_->threads) t.join();
}

Status Coordinator::schedule(const std::string& step, std::string args, RemoteValue* out) {
  auto state = std::make_shared<RemoteValue::State>();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->fatal.ok()) {
      Status s = impl_->fatal;
      impl_->fatal = Status::OK();
      return s;
    }
    impl_->queue.push_back({impl_->next_seq++, step, std::move(args), state});
  }
  impl_->cv.notify_all();
  if (out != nullptr) *out = RemoteValue(state);
  return Status::OK();
}

Status Coordinator::join(Deadline deadline) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  for (;;) {
    const bool idle = impl_->queue.empty() && impl_->running == 0;
    if (idle) {
      Status s = impl_->fatal;
      impl_->fatal = Status::OK();
      return s;
    }
    const bool any_up = std::find(impl_->up.begin(), impl_->up.end(), true) != impl_->up.end();
    if (!any_up && Clock::now() - impl_->all_down_since >
                       seconds_duration(impl_->options.no_worker_timeout_seconds)) {
      return PeerFailure(
          "no worker has answered for " +
          std::to_string(static_cast<long long>(impl_->options.no_worker_timeout_seconds)) +
          " s (KOLO_PEER_TIMEOUT_SECONDS) with " +
          std::to_string(impl_->queue.size() + impl_->running) +
          " steps to run: " + impl_->down_list());
    }
    if (Clock::now() >= deadline) {
      return PeerFailure("join: the scheduled steps did not finish by the deadline (" +
                         std::to_string(impl_->queue.size()) + " queued, " +
                         std::to_string(impl_->running) + " running)");
    }
    impl_->cv.wait_until(lock, std::min(deadline, deadline_after(0.5)));
  }
}

bool Coordinator::done() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->queue.empty() && impl_->running == 0;
}

void Coordinator::stop_workers(Deadline deadline) {
  std::vector<TaskAddress> workers;
  for (int w = 0; w < num_workers(); ++w) {
    workers.push_back({impl_->options.worker_endpoints[w], impl_->options.worker_names[w]});
  }
  stop_tasks(workers, {}, impl_->options.secret, impl_->options.self, deadline);
}

int Coordinator::num_workers() const {
  return static_cast<int>(impl_->options.worker_endpoints.size());
}

int Coordinator::workers_up() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(std::count(impl_->up.begin(), impl_->up.end(), true));
}

std::int64_t Coordinator::worker_failures() const { return impl_->failures.load(); }
std::int64_t Coordinator::worker_rejoins() const { return impl_->rejoins.load(); }

}  // namespace kolo::ps
