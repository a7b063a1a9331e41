// kolorun's elastic driver: the loop of an elastic job (see elastic_driver.h; one step of
// it: event_loop.h).
#include "launcher/elastic_driver.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "common/format.h"
#include "launcher/event_loop.h"
#include "launcher/job.h"
#include "launcher/lines.h"
#include "launcher/mpirun_command.h"
#include "launcher/process.h"
#include "launcher/worker_process.h"

namespace kolo::launcher {
namespace {

namespace ek = rendezvous::elastic_keys;

// How often the store is read for arrivals (while a removed worker waits for them) and for
// reset requests (while the job runs).
constexpr auto kArrivalPoll = std::chrono::milliseconds(100);
constexpr auto kResetPoll = std::chrono::milliseconds(250);

struct Worker : WorkerProcess {
  int id = 0;
  // (generation, rank) of every plan that holds it, oldest first; its output prefix is
  // the newest rank.
  std::vector<std::pair<int, int>> ranks;
  bool removed = false;  // left out of the newest plan: its end is no failure
  std::optional<Deadline> removed_at, term_at, kill_at;
};

std::string plural(int n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// The job's state; owned by kolorun's one thread.
class Driver {
 public:
  explicit Driver(const ElasticOptions& o)
      : o_(o),
        console_(o.terminal),
        blacklist_(o.cooldown, o.uniform ? o.uniform : random_uniform()),
        hosts_(o.hosts) {}
  int run();

 private:
  static std::function<double()> random_uniform() {
    auto engine = std::make_shared<std::mt19937_64>(std::random_device{}());
    return [engine] { return std::uniform_real_distribution<double>(0, 1)(*engine); };
  }
  void say(const std::string& text) { console_.message(2, "kolorun: " + text + "\n"); }
  int generation() const { return static_cast<int>(plans_.size()) - 1; }
  bool alive(const Worker& w) const { return !w.exit && !(w.reaped && w.child.pid < 0); }
  void on_line(Worker* w, int stream, std::string_view line);
  void on_redraw(Worker* w, int stream, std::string_view text);
  void reap();
  void maybe_finish(Worker* w);
  void on_end(Worker* w, WorkerExit e);
  void publish(Worker* w, const WorkerExit& e);
  // Writes the next plan if the workers or the hosts call for one (`force`: a reset was
  // requested), or waits for slots; `why` says what changed.
  void replan(const std::string& why, bool force = false);
  bool write_plan(const PlanResult& plan, const std::string& why);
  void start(Worker* w, const std::vector<PlanMember>& plan, int rank);
  void give_up(const std::string& message, int status);
  // Starts the discovery script on a thread of its own (its run is bounded by
  // kDiscoveryTimeoutSeconds): the loop goes on serving workers meanwhile.
  void discover();
  // Takes the script's result once it is in (false while it runs).
  bool take_discovery();
  // The hosts workers may start on: every host, less (this_host_only) the other hosts.
  std::vector<HostSlots> reachable_hosts() const;
  void poll_store();
  void on_user_signal(int sig);
  void stop_all();
  void on_deadlines();
  std::optional<Deadline> next_deadline() const;
  bool done() const;
  int exit_status() const;

  const ElasticOptions& o_;
  Console console_;
  Blacklist blacklist_;
  std::vector<HostSlots> hosts_;
  std::set<std::string> unreachable_named_;  // the other hosts a warning named (this_host_only)
  StartContext start_;
  std::deque<Worker> workers_;  // every worker of the job, in start order (by id)
  std::vector<std::vector<PlanMember>> plans_;
  // Fewer than --min-np slots since then: the job ends at wait_since_ + --elastic-timeout.
  std::optional<Deadline> wait_since_;
  std::optional<Deadline> cooldown_wake_;  // the next end of a host's cooldown
  int waiting_workers_ = 0;
  bool finished_ = false;  // elastic/finished set: no plan follows
  bool stopping_ = false, killed_ = false;
  std::optional<Deadline> kill_deadline_;
  int user_signal_ = 0;
  std::optional<int> give_up_status_;
  std::optional<int> failed_after_finish_;
  std::optional<int> first_failure_status_;
  std::vector<std::string> failures_;  // exit sentences, for "every worker failed"
  Deadline next_discovery_, next_reset_poll_, next_arrival_poll_;
  struct Discovered {
    Status status;
    std::vector<HostSlots> hosts;
  };
  std::future<Discovered> discovery_;  // valid while a run is in flight or not yet taken
  std::int64_t reset_requests_seen_ = 0;
  // The generation whose arrivals the removed workers wait for (-1: none).
  int arrivals_for_ = -1;
  bool store_failed_ = false;
};

int Driver::run() {
  const int signal_fd = route_signals_to_pipe({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  ::signal(SIGPIPE, SIG_IGN);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // as job.cc: leftovers end with the job
  start_.guard = start_group_guard(o_.kill_after_seconds);
  start_.base_env = worker_base_env(/*drop_rank_variables=*/true);
  start_.rendezvous_secret = o_.rendezvous_secret;
  start_.event_token = o_.event_token;
  const Deadline now = Clock::now();
  next_discovery_ = now + seconds_duration(o_.discovery_interval_s);
  next_reset_poll_ = now + kResetPoll;
  next_arrival_poll_ = now;
  replan("start");

  while (!done()) {
    PollSet step;
    for (Worker& w : workers_) {
      if (!w.output) continue;
      step.add(
          w.output.get(), [this, &w](std::string_view line) { on_line(&w, 1, line); },
          [this, &w](std::string_view line) { on_line(&w, 2, line); },
          [this, &w](std::string_view text) { on_redraw(&w, 1, text); },
          [this, &w](std::string_view text) { on_redraw(&w, 2, text); });
    }
    step.add_signals(signal_fd, [this](const SignalEvent& e) { on_user_signal(e.signal); });
    if (Status s = step.wait(next_deadline()); !s.ok()) {
      say(s.message());
      give_up("stopping the job", 1);
    }
    reap();
    for (Worker& w : workers_) maybe_finish(&w);
    on_deadlines();
  }
  console_.finish();
  end_descendants(std::chrono::milliseconds(500));
  end_group_guard(&start_.guard);
  return exit_status();
}

void Driver::on_line(Worker* w, int stream, std::string_view line) {
  if (!take_exit_marker(w, stream, o_.event_token, &line)) return;
  std::string text = "[" + std::to_string(w->plan.rank) + "] ";
  text.append(line);
  console_.line(stream, w->plan.rank, text);
  remember_line(w, line);
}

void Driver::on_redraw(Worker* w, int stream, std::string_view text) {
  std::string shown = "[" + std::to_string(w->plan.rank) + "] ";
  shown.append(text);
  console_.redraw(stream, w->plan.rank, shown);
}

void Driver::reap() { reap_workers(workers_, stopping_ ? kDrainWhenStopping : kDrainAfterExit); }

void Driver::maybe_finish(Worker* w) {
  if (!end_known(*w)) return;
  if (w->output->open() && Clock::now() >= *w->drain_until) {
    stop_reading(w, [&](int stream, std::string_view l) { on_line(w, stream, l); });
  }
  on_end(w, exit_of(*w));
}

void Driver::on_end(Worker* w, WorkerExit e) {
  e.stop = w->stopped_by_job && e.failed() ? Stop::kByJob : Stop::kNone;
  w->exit = e;
  publish(w, e);
  if (stopping_) return;  // the job is ending: what follows is its consequence
  if (w->removed) {
    say(exit_sentence(e) + " (it was no longer in the plan)");
    return;
  }
  if (!e.failed()) {
    if (!finished_) {
      finished_ = true;
      if (o_.store->set(ek::kFinishedKey, exit_sentence(e)).ok()) {
        say(exit_sentence(e) + ": training is over; waiting for the other workers to end");
      }
    }
    return;
  }
  say(e.shim_lost ? exit_sentence(e) : describe_exit(e));
  if (!w->last_lines.empty()) {
    console_.message(2, last_lines_text(w->last_lines, std::to_string(w->plan.rank)));
  }
  failures_.push_back(exit_sentence(e));
  if (!first_failure_status_) first_failure_status_ = e.status();
  if (finished_) {
    if (!failed_after_finish_) failed_after_finish_ = e.status();
    return;
  }
  const auto back = blacklist_.add(w->plan.host, Clock::now());
  cooldown_wake_ = blacklist_.next_return(Clock::now());
  if (back) {
    const double s = std::chrono::duration<double>(*back - Clock::now()).count();
    say("host " + w->plan.host + " is blacklisted for " + number_string(std::round(s * 10) / 10) +
        " s (--blacklist-cooldown-range): no new worker starts there before that");
  } else {
    say("host " + w->plan.host + " is blacklisted: no new worker starts there");
  }
  bool any = false;
  for (const Worker& other : workers_) any = any || (alive(other) && !other.removed);
  if (!any) {
    std::string text = "every worker of the elastic job failed:";
    for (size_t i = 0; i < failures_.size(); ++i) text += (i ? "; " : " ") + failures_[i];
    give_up(text, *first_failure_status_);
    return;
  }
  replan(worker_name(w->plan) + " (id " + std::to_string(w->id) + ") failed");
}

void Driver::publish(Worker* w, const WorkerExit& e) {
  if (store_failed_) return;
  for (const auto& [g, rank] : w->ranks) {
    WorkerExit in_g = e;
    in_g.rank = rank;
    const std::string prefix = ek::launcher_prefix(g) + "/";
    std::int64_t total = 0;
    Status s = o_.store->set(prefix + "exit/" + std::to_string(rank), exit_sentence(in_g));
    if (s.ok()) s = o_.store->add(prefix + "exits", 1, &total);
    if (!s.ok()) {
      store_failed_ = true;  // the store is in this process: it will not come back
      say("warning: could not publish " + worker_name(w->plan) +
          "'s end in the job's store: " + s.message());
      return;
    }
  }
}

void Driver::replan(const std::string& why, bool force) {
  if (finished_ || stopping_) return;
  const Deadline now = Clock::now();
  PlanRequest request;
  // The living workers in the newest plan's rank order (every started worker is in it).
  if (!plans_.empty()) {
    for (const PlanMember& m : plans_.back()) {
      const Worker& w = workers_[static_cast<size_t>(m.id)];
      if (alive(w)) request.living.push_back({w.id, w.plan.host});
    }
  }
  request.hosts = reachable_hosts();
  request.blocked = blacklist_.blocked_of(request.hosts, now);
  request.min_np = o_.min_np;
  request.max_np = o_.max_np > 0 ? o_.max_np : (plans_.empty() ? o_.start_np : 0);
  request.next_id = static_cast<int>(workers_.size());
  PlanResult plan = next_plan(request);
  if (plan.wait) {
    bool for_good = o_.discovery_script.empty() && !hosts_.empty();
    for (const auto& h : hosts_) for_good = for_good && blacklist_.blocked_for_good(h.host, now);
    if (for_good) {
      give_up(
          "every host is blacklisted (a worker failed on each, and there is no "
          "--blacklist-cooldown-range): " +
              plural(plan.workers, "worker remains", "workers remain") + " of --min-np " +
              std::to_string(o_.min_np) + "; stopping",
          first_failure_status_.value_or(1));
      return;
    }
    if (!wait_since_ || waiting_workers_ != plan.workers) {
      say("waiting for slots: " + plural(plan.workers, "usable slot", "usable slots") +
          " of --min-np " + std::to_string(o_.min_np) + " (" + why + "; at most " +
          number_string(o_.elastic_timeout_s) + " s in all, --elastic-timeout)");
    }
    if (!wait_since_) wait_since_ = now;
    waiting_workers_ = plan.workers;
    return;
  }
  wait_since_.reset();
  if (!force && !plans_.empty() && plan.members == plans_.back()) return;
  const int g = static_cast<int>(plans_.size());
  if (o_.reset_limit >= 0 && g > o_.reset_limit) {
    give_up("the job was reset " + plural(g, "time", "times") +
                ", the reset limit (--reset-limit " + std::to_string(o_.reset_limit) +
                "); stopping",
            first_failure_status_.value_or(1));
    return;
  }
  write_plan(plan, why);
}

bool Driver::write_plan(const PlanResult& plan, const std::string& why) {
  const int g = static_cast<int>(plans_.size());
  std::int64_t count = 0;
  Status s = o_.store->set(ek::plan_key(g), ek::format_plan(plan.members));
  if (s.ok()) s = o_.store->add(ek::kGenerationsKey, 1, &count);
  if (!s.ok()) {
    give_up("cannot write the elastic plan to the job's store: " + s.message(), 1);
    return false;
  }
  plans_.push_back(plan.members);
  reset_requests_seen_ = 0;
  std::string text = "generation " + std::to_string(g) + " (" + why +
                     "): " + plural(static_cast<int>(plan.members.size()), "worker", "workers") +
                     ":";
  for (size_t rank = 0; rank < plan.members.size(); ++rank) {
    text += (rank ? ", id " : " id ") + std::to_string(plan.members[rank].id) + " on " +
            plan.members[rank].host;
  }
  say(text);
  for (int id : plan.removed) {
    Worker& w = workers_[static_cast<size_t>(id)];
    w.removed = true;
    w.removed_at = Clock::now();
  }
  if (!plan.removed.empty() || arrivals_for_ >= 0) arrivals_for_ = g;
  std::vector<int> not_started;
  for (size_t rank = 0; rank < plan.members.size(); ++rank) {
    const PlanMember& m = plan.members[rank];
    if (m.id >= static_cast<int>(workers_.size())) {
      workers_.emplace_back();
      workers_.back().id = m.id;
      start(&workers_.back(), plan.members, static_cast<int>(rank));
      if (workers_.back().reaped) not_started.push_back(m.id);
    } else {
      Worker& w = workers_[static_cast<size_t>(m.id)];
      w.plan.rank = static_cast<int>(rank);
      w.ranks.emplace_back(g, static_cast<int>(rank));
    }
  }
  // A worker that could not be started ended with status 127 (what a shell reports).
  for (int id : not_started) {
    Worker& w = workers_[static_cast<size_t>(id)];
    WorkerExit e;
    e.rank = w.plan.rank;
    e.host = w.plan.host;
    e.exit_code = 127;
    on_end(&w, e);
  }
  return true;
}

void Driver::start(Worker* w, const std::vector<PlanMember>& plan, int rank) {
  const int g = static_cast<int>(plans_.size()) - 1;
  w->plan = elastic_worker_plan(o_, plan, rank, g);
  w->ranks.emplace_back(g, rank);
  if (Status s = start_worker(start_, w); !s.ok()) {
    say(worker_name(w->plan) + " (host " + w->plan.host + "): " + s.message());
  }
}

void Driver::give_up(const std::string& message, int status) {
  if (stopping_) return;
  say(message);
  give_up_status_ = status == 0 ? 1 : status;
  if (!finished_ && !store_failed_) (void)o_.store->set(ek::kFinishedKey, message);
  finished_ = true;
  stop_all();
}

void Driver::discover() {
  if (discovery_.valid()) return;  // the last run is still going
  discovery_ =
      std::async(std::launch::async, [script = o_.discovery_script, slots = o_.default_slots] {
        Discovered d;
        d.status = run_discovery_script(script, slots, kDiscoveryTimeoutSeconds, &d.hosts);
        return d;
      });
}

bool Driver::take_discovery() {
  if (!discovery_.valid() ||
      discovery_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return false;
  }
  Discovered d = discovery_.get();
  // The interval runs from the end of a run, as before (a slow script is not rerun at once).
  next_discovery_ = Clock::now() + seconds_duration(o_.discovery_interval_s);
  if (!d.status.ok()) {
    say("warning: " + d.status.message() + "; keeping the last hosts");
    return true;
  }
  std::vector<HostSlots> hosts = std::move(d.hosts);
  if (hosts == hosts_) return true;
  std::string text = "the hosts changed:";
  for (const auto& h : hosts) text += " " + h.host + ":" + std::to_string(h.slots);
  if (hosts.empty()) text += " none";
  say(text);
  hosts_ = std::move(hosts);
  if (o_.this_host_only) {
    for (const auto& h : hosts_) {
      if (is_this_host(h.host, o_.inputs.this_host_names) ||
          !unreachable_named_.insert(h.host).second) {
        continue;
      }
      say("warning: host " + h.host +
          " (from the discovery script) is not this host, but this job's store and workers "
          "listen on 127.0.0.1 only (its first hosts were all this host under a loopback "
          "name): no worker starts there. To let other hosts join, name this host by an "
          "address they reach in the script's first hosts, or give --rendezvous-addr");
    }
  }
  replan("the hosts changed");
  return true;
}

std::vector<HostSlots> Driver::reachable_hosts() const {
  if (!o_.this_host_only) return hosts_;
  std::vector<HostSlots> here;
  for (const auto& h : hosts_) {
    if (is_this_host(h.host, o_.inputs.this_host_names)) here.push_back(h);
  }
  return here;
}

void Driver::poll_store() {
  const Deadline now = Clock::now();
  if (store_failed_ || plans_.empty()) return;
  if (now >= next_reset_poll_) {
    next_reset_poll_ = now + kResetPoll;
    std::string value;
    bool found = false;
    const std::string key = ek::reset_requests_key(generation());
    if (o_.store->try_get(key, &value, &found).ok() && found) {
      const std::int64_t n = std::atoll(value.c_str());
      if (n > reset_requests_seen_) {
        reset_requests_seen_ = n;
        replan("a worker asked for a reset", /*force=*/true);
      }
    }
  }
  if (arrivals_for_ >= 0 && now >= next_arrival_poll_) {
    next_arrival_poll_ = now + kArrivalPoll;
    arrivals_for_ = generation();
    std::vector<std::string> keys;
    for (size_t rank = 0; rank < plans_.back().size(); ++rank) {
      keys.push_back(ek::arrived_key(arrivals_for_, static_cast<int>(rank)));
    }
    bool all = false;
    if (o_.store->check(keys, &all).ok() && all) {
      for (Worker& w : workers_) {
        if (w.removed && alive(w) && !w.term_at) {
          w.term_at = now + seconds_duration(kRemovedGraceSeconds);
        }
      }
      arrivals_for_ = -1;
    }
  }
}

void Driver::on_user_signal(int sig) {
  if (user_signal_ != 0) {
    killed_ = true;
    for (Worker& w : workers_) kill_worker(&w);
    return;
  }
  user_signal_ = sig;
  say(std::string("received ") + stop_signal_name(sig) + ", stopping the job");
  if (!finished_ && !store_failed_) {
    (void)o_.store->set(ek::kFinishedKey, std::string("kolorun received ") + stop_signal_name(sig));
  }
  finished_ = true;
  stop_all();
}

void Driver::stop_all() {
  if (stopping_) return;
  stopping_ = true;
  for (Worker& w : workers_) stop_worker(&w);
  kill_deadline_ = Clock::now() + seconds_duration(o_.kill_after_seconds);
}

void Driver::on_deadlines() {
  const Deadline now = Clock::now();
  if (stopping_ && !killed_ && kill_deadline_ && now >= *kill_deadline_) {
    killed_ = true;
    for (Worker& w : workers_) kill_worker(&w);
  }
  for (Worker& w : workers_) {
    if (w.reaped && w.output && w.output->open() && now >= *w.drain_until) {
      stop_reading(&w, [&](int stream, std::string_view l) { on_line(&w, stream, l); });
    }
    if (!w.removed || !w.running) continue;
    // A removed worker that did not leave by itself; also when the newer plan's members
    // never all arrive (they fail instead), at most --elastic-timeout after it was removed.
    const bool late = now >= *w.removed_at + seconds_duration(o_.elastic_timeout_s);
    if (!w.kill_at && ((w.term_at && now >= *w.term_at) || late)) {
      say(worker_name(w.plan) + " (id " + std::to_string(w.id) +
          ") is no longer in the plan and did not leave: stopping it");
      stop_worker(&w);
      w.kill_at = now + seconds_duration(o_.kill_after_seconds);
    } else if (w.kill_at && now >= *w.kill_at) {
      kill_worker(&w);
    }
  }
  if (stopping_) return;
  if (wait_since_ && now >= *wait_since_ + seconds_duration(o_.elastic_timeout_s)) {
    give_up("the elastic job had " + plural(waiting_workers_, "usable slot", "usable slots") +
                " of --min-np " + std::to_string(o_.min_np) + " for " +
                number_string(o_.elastic_timeout_s) + " s (--elastic-timeout); stopping",
            first_failure_status_.value_or(1));
    return;
  }
  if (cooldown_wake_ && now >= *cooldown_wake_) {
    cooldown_wake_ = blacklist_.next_return(now);
    replan("a blacklisted host's cooldown ended");
  }
  if (!o_.discovery_script.empty()) {
    if (!take_discovery() && !discovery_.valid() && now >= next_discovery_) discover();
  }
  poll_store();
}

std::optional<Deadline> Driver::next_deadline() const {
  Deadlines d;
  if (stopping_ && !killed_) d.consider(kill_deadline_);
  for (const Worker& w : workers_) {
    if (w.reaped && (!w.exit || (w.output && w.output->open()))) d.consider(w.drain_until);
    if (w.removed && w.running) {
      d.consider(w.kill_at ? w.kill_at : w.term_at);
      d.consider(*w.removed_at + seconds_duration(o_.elastic_timeout_s));
    }
  }
  if (!stopping_) {
    if (wait_since_) d.consider(*wait_since_ + seconds_duration(o_.elastic_timeout_s));
    d.consider(cooldown_wake_);
    if (!o_.discovery_script.empty()) {
      // While a run is in flight, look for its result every 20 ms.
      d.consider(discovery_.valid() ? Clock::now() + std::chrono::milliseconds(20)
                                    : next_discovery_);
    }
    if (!plans_.empty() && !finished_) d.consider(next_reset_poll_);
    if (arrivals_for_ >= 0) d.consider(next_arrival_poll_);
  }
  return d.earliest();
}

bool Driver::done() const {
  for (const Worker& w : workers_) {
    if (!w.exit || (w.output && w.output->open())) return false;
  }
  // Nobody left: over once training ended or the driver gave up; while waiting for slots
  // with nobody alive, the --elastic-timeout deadline ends it.
  return finished_ || stopping_;
}

int Driver::exit_status() const {
  if (user_signal_ != 0) return 128 + user_signal_;
  if (give_up_status_) return *give_up_status_;
  if (failed_after_finish_) return *failed_after_finish_;
  return finished_ ? 0 : 1;
}

}  // namespace

int run_elastic_job(const ElasticOptions& options) {
  Driver driver(options);
  return driver.run();
}

}  // namespace kolo::launcher
