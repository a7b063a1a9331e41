// The chief's heartbeat and stop, and a task's serving loop (task.h).
#include "ps/task.h"

#include <atomic>
#include <chrono>

#include "common/logging.h"
#include "ps/task_wire.h"

namespace kolo::ps {
namespace {

std::unique_ptr<RpcClient> client_for(const TaskAddress& task, const std::string& secret,
                                      const std::string& self) {
  RpcClientOptions o;
  o.endpoint = task.endpoint;
  o.secret = secret;
  o.peer = task.name;
  o.self = self;
  return std::make_unique<RpcClient>(o);
}

}  // namespace

ChiefHeartbeat::ChiefHeartbeat(std::vector<TaskAddress> tasks, std::string secret, std::string self)
    : tasks_(std::move(tasks)),
      secret_(std::move(secret)),
      self_(std::move(self)),
      went_silent_(tasks_.size(), false) {
  thread_ = std::thread([this] { loop(); });
}

ChiefHeartbeat::~ChiefHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::vector<bool> ChiefHeartbeat::went_silent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return went_silent_;
}

void ChiefHeartbeat::loop() {
  std::vector<std::unique_ptr<RpcClient>> clients;
  for (const TaskAddress& t : tasks_) clients.push_back(client_for(t, secret_, self_));
  std::vector<bool> answered(clients.size(), false), silent(clients.size(), false);
  std::vector<int> missed(clients.size(), 0);  // heartbeats unanswered in a row
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    for (std::size_t i = 0; i < clients.size(); ++i) {
      Message req{task_wire::kChiefHeartbeat, {}, {}}, reply;
      const bool ok = clients[i]->call(req, &reply, deadline_after(0.5)).ok();
      missed[i] = ok ? 0 : missed[i] + 1;
      silent[i] = answered[i] && missed[i] >= 2;
      answered[i] = answered[i] || ok;
    }
    lock.lock();
    went_silent_ = silent;
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_; });
  }
}

void stop_tasks(const std::vector<TaskAddress>& tasks, std::vector<bool> silent,
                const std::string& secret, const std::string& self, Deadline deadline) {
  silent.resize(tasks.size(), false);
  std::vector<std::thread> stops;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const Deadline brief = deadline_after(0.2);
    const Deadline until = silent[i] && brief < deadline ? brief : deadline;
    stops.emplace_back([&secret, &self, t = tasks[i], until] {
      std::unique_ptr<RpcClient> client = client_for(t, secret, self);
      Message req{task_wire::kStop, {}, {}}, reply;
      Status s = client->call(req, &reply, until);
      if (!s.ok()) {
        KOLO_LOG(kInfo, "ps") << t.name << " was not told to stop: " << s.message();
      }
    });
  }
  for (std::thread& t : stops) t.join();
}

struct StopSignal::State {
  std::mutex mu;
  std::condition_variable cv;
  bool stopped = false;  // GUARDED_BY(mu)
};

StopSignal::StopSignal(RpcServer& server) : state_(std::make_shared<State>()) {
  server.handle(task_wire::kStop, [state = state_](const Message&, Message*, Deadline) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->stopped = true;
    }
    state->cv.notify_all();
    return Status::OK();
  });
}

bool StopSignal::wait_until(Deadline deadline) {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->cv.wait_until(lock, deadline, [&] { return state_->stopped; });
}

Status serve_until_stopped(RpcServer& server, const ServeOptions& options,
                           const std::function<bool(Deadline)>& stopped) {
  // Shared with the handler, which the server may still run after this function returns.
  auto last_heard = std::make_shared<std::atomic<std::int64_t>>(0);  // steady ticks; 0: never
  server.handle(task_wire::kChiefHeartbeat, [last_heard](const Message&, Message*, Deadline) {
    last_heard->store(Clock::now().time_since_epoch().count());
    return Status::OK();
  });
  KOLO_RETURN_IF_ERROR(server.start());
  KOLO_LOG(kInfo, "ps") << options.self << " serves at " << server.endpoint();
  const Deadline started = Clock::now();
  for (;;) {
    if (stopped(deadline_after(1))) return Status::OK();
    const std::int64_t heard = last_heard->load();
    const auto since =
        heard == 0 ? Clock::now() - started : Clock::now() - Deadline(Clock::duration(heard));
    const double bound = heard == 0 ? options.start_timeout_seconds : options.peer_timeout_seconds;
    if (since > seconds_duration(bound)) {
      return PeerFailure(options.self + ": the chief " + options.chief +
                         (heard == 0 ? " never came" : " has not been heard from") + " in " +
                         std::to_string(static_cast<long long>(bound)) + " s (" +
                         (heard == 0 ? "KOLO_START_TIMEOUT_SECONDS" : "KOLO_PEER_TIMEOUT_SECONDS") +
                         "); it ended without stopping this task, or died; this task stops "
                         "serving");
    }
  }
}

}  // namespace kolo::ps
