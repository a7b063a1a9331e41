// kolorun's own launcher: the workers' loop (see job.h; one step of it: event_loop.h).
#include "launcher/job.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "common/deadline.h"
#include "launcher/cause.h"
#include "launcher/event_loop.h"
#include "launcher/events.h"
#include "launcher/lines.h"
#include "launcher/process.h"
#include "launcher/ps_plan.h"
#include "launcher/worker_process.h"
#include "rendezvous/launcher_keys.h"
#include "startup/config.h"

namespace kolo::launcher {
namespace {

// After the first failure, how long kolorun collects others before it names the cause
// (unless every worker ended sooner): cause.h.
constexpr auto kCauseWindow = std::chrono::seconds(1);

// A worker of the job: its process, and for a ps job's worker task its restarts.
struct Worker : WorkerProcess {
  int restarts = 0;              // a ps job's worker: times it was started again
  bool restart_pending = false;  // once its output is drained
};

// The job's state; owned by kolorun's one thread.
class Job {
 public:
  explicit Job(const JobOptions& o) : o_(o), console_(o.terminal) {}
  int run();

 private:
  void say(const std::string& text) { console_.message(2, "kolorun: " + text + "\n"); }
  // Spawns w's plan; false (after saying why) if it could not be started.
  bool start(Worker* w);
  // A worker that could not be started: it ended with status 127.
  void on_start_failure(Worker* w);
  void on_line(Worker* w, int stream, std::string_view line);
  void on_redraw(Worker* w, int stream, std::string_view text);
  void reap();
  // Once a worker was reaped and its output is in (or its drain time passed): its end.
  void maybe_finish(Worker* w);
  void on_end(Worker* w, WorkerExit e);
  // A parameter-server job's task ended (job.h): name it, restart it, or end the job.
  void on_task_end(Worker* w, const WorkerExit& e);
  void say_last_lines(const Worker& w);
  void maybe_restart(Worker* w);
  void publish(const WorkerExit& e, const WorkerPlan& plan);
  void decide_cause();
  void on_user_signal(int sig);
  void stop_all();
  void kill_all();
  bool all_ended() const;
  std::optional<Deadline> next_deadline() const;
  void on_deadlines();
  int exit_status() const;

  const JobOptions& o_;
  StartContext start_;  // every worker's environment, secrets and the group guard
  Console console_;
  std::vector<Worker> workers_;
  std::vector<WorkerExit> candidates_;  // failures that may be the cause, in order
  std::vector<std::deque<std::string>> candidate_lines_;
  std::optional<Clock::time_point> cause_deadline_, grace_deadline_, kill_deadline_;
  bool cause_decided_ = false;
  bool cause_extended_ = false;  // decide_cause() waited once for a rank still ending
  std::set<int> awaited_;        // the ranks it waits for
  std::optional<WorkerExit> cause_;
  std::optional<WorkerExit> chief_exit_;  // a parameter-server job's status
  int user_signal_ = 0;
  bool stopping_ = false, killed_ = false;
  bool publish_failed_ = false;
};

int Job::run() {
  const int signal_fd = route_signals_to_pipe({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  ::signal(SIGPIPE, SIG_IGN);
  // What a worker leaves behind when it exits (a daemon that called setsid(), say)
  // becomes kolorun's child, and is ended with the job (end_descendants).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  start_.guard = start_group_guard(o_.kill_after_seconds);
  // An outer job's secret must not leak in, nor kolorun's marker token (nor, into a ps
  // job, an outer job's ranks).
  start_.base_env = worker_base_env(o_.parameter_server);
  start_.rendezvous_secret = o_.rendezvous_secret;
  start_.event_token = o_.event_token;
  workers_.resize(o_.workers.size());
  std::vector<Worker*> not_started;
  for (size_t i = 0; i < workers_.size(); ++i) {
    workers_[i].plan = o_.workers[i];
    if (!start(&workers_[i])) not_started.push_back(&workers_[i]);
  }
  // After every start: an end may stop the job (a ps job's chief), and must reach all.
  for (Worker* w : not_started) on_start_failure(w);

  auto open = [this] {
    for (const Worker& w : workers_) {
      if (w.running || (w.output && w.output->open())) return true;
    }
    return false;
  };
  while (open() || !all_ended()) {
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
      stop_all();
    }
    reap();
    for (Worker& w : workers_) maybe_finish(&w);
    for (Worker& w : workers_) maybe_restart(&w);
    on_deadlines();
  }
  if (!cause_decided_ && cause_deadline_) decide_cause();
  console_.finish();
  end_descendants(std::chrono::milliseconds(500));
  end_group_guard(&start_.guard);
  return exit_status();
}

bool Job::start(Worker* w) {
  if (Status st = start_worker(start_, w); !st.ok()) {
    // Not started; or started without its secrets (it fails by itself, and is reaped).
    say(worker_name(w->plan) + (w->running ? "" : " (host " + w->plan.host + ")") + ": " +
        st.message());
    return w->running;
  }
  return true;
}

void Job::on_start_failure(Worker* w) {
  WorkerExit e;
  e.rank = w->plan.rank;
  e.host = w->plan.host;
  e.exit_code = 127;  // what a shell reports for a program it cannot run
  on_end(w, e);
}

void Job::on_line(Worker* w, int stream, std::string_view line) {
  if (!take_exit_marker(w, stream, o_.event_token, &line)) return;
  std::string text = "[" + worker_label(w->plan) + "] ";
  text.append(line);
  console_.line(stream, w->plan.rank, text);
  remember_line(w, line);
}

void Job::on_redraw(Worker* w, int stream, std::string_view text) {
  // Not kept in last_lines: only the line it ends as is.
  std::string shown = "[" + worker_label(w->plan) + "] ";
  shown.append(text);
  console_.redraw(stream, w->plan.rank, shown);
}

void Job::reap() { reap_workers(workers_, stopping_ ? kDrainWhenStopping : kDrainAfterExit); }

void Job::maybe_finish(Worker* w) {
  if (!end_known(*w)) return;
  if (w->output->open() && Clock::now() >= *w->drain_until) {
    // Something it left behind holds its pipes: stop reading, and end its group.
    stop_reading(w, [&](int stream, std::string_view l) { on_line(w, stream, l); });
  }
  on_end(w, exit_of(*w));
}

void Job::on_end(Worker* w, WorkerExit e) {
  e.stop = w->stopped_by_job && e.failed() ? Stop::kByJob : Stop::kNone;
  if (o_.parameter_server) e.name = worker_name(w->plan);
  w->exit = e;
  publish(e, w->plan);
  if (o_.parameter_server) {
    on_task_end(w, e);
    return;
  }
  if (!cause_decided_ && cause_weight(e) > 0 && !stopping_) {
    candidates_.push_back(e);
    candidate_lines_.push_back(w->last_lines);
    if (!cause_deadline_) cause_deadline_ = Clock::now() + kCauseWindow;
  }
  const bool awaited_ended = std::all_of(awaited_.begin(), awaited_.end(), [&](int r) {
    return workers_[static_cast<size_t>(r)].exit.has_value();
  });
  if (cause_deadline_ && !cause_decided_ && (all_ended() || (cause_extended_ && awaited_ended))) {
    decide_cause();
  }
}

void Job::on_task_end(Worker* w, const WorkerExit& e) {
  const bool chief = w->plan.task_type == "chief";
  if (chief) chief_exit_ = e;
  if (stopping_) return;  // the job is ending: what follows is its consequence
  if (chief) {
    if (e.failed()) {
      say(exit_sentence(e));
      say_last_lines(*w);
    }
    bool others = false;
    for (const Worker& other : workers_) others = others || other.running;
    if (others) say("the chief ended: stopping the other tasks");
    stop_all();
    return;
  }
  say(exit_sentence(e));  // the job goes on without it: say so, even for a clean exit
  if (!e.failed()) return;
  say_last_lines(*w);
  if (w->plan.task_type != "worker" || o_.max_restarts == 0) return;
  if (w->restarts < o_.max_restarts) {
    w->restart_pending = true;
  } else {
    say("not restarting " + worker_name(w->plan) + ": it was restarted " +
        std::to_string(w->restarts) + (w->restarts == 1 ? " time" : " times") +
        " already (--max-restarts " + std::to_string(o_.max_restarts) + ")");
  }
}

void Job::say_last_lines(const Worker& w) {
  if (!w.last_lines.empty())
    console_.message(2, last_lines_text(w.last_lines, worker_label(w.plan)));
}

void Job::maybe_restart(Worker* w) {
  if (!w->restart_pending) return;
  if (stopping_) {
    w->restart_pending = false;
    return;
  }
  // Its old pipes first (what it wrote last belongs before the new run's lines).
  if (w->output && w->output->open()) {
    if (Clock::now() < *w->drain_until) return;
    stop_reading(w, [&](int stream, std::string_view l) { on_line(w, stream, l); });
  }
  ++w->restarts;
  say("restarting " + worker_name(w->plan) + " with the same TF_CONFIG (restart " +
      std::to_string(w->restarts) + " of --max-restarts " + std::to_string(o_.max_restarts) + ")");
  const int restarts = w->restarts;
  WorkerPlan plan = std::move(w->plan);
  *w = Worker{};
  w->plan = std::move(plan);
  w->restarts = restarts;
  if (!start(w)) on_start_failure(w);
}

void Job::publish(const WorkerExit& e, const WorkerPlan& plan) {
  if (o_.store == nullptr || publish_failed_) return;
  // The values first: a reader woken by the counter finds the text there.
  const std::string sentence = exit_sentence(e);
  Status s = o_.store->set("launcher/exit/" + std::to_string(e.rank), sentence);
  if (s.ok() && !plan.task_type.empty()) {
    s = o_.store->set("launcher/task_exit/" + worker_label(plan), sentence);
  }
  std::int64_t total = 0;
  if (s.ok()) s = o_.store->add("launcher/exits", 1, &total);
  if (!s.ok()) {
    publish_failed_ = true;  // the store is in this process: it will not come back
    say("warning: could not publish " + worker_name(plan) +
        "'s end in the job's store: " + s.message());
  }
}

void Job::decide_cause() {
  if (cause_decided_) return;
  // Which ranks each candidate's kolo says it waited for when they left (launcher_keys.h).
  std::map<int, std::vector<int>> after;
  bool waits_for_running = false;
  for (const WorkerExit& e : candidates_) {
    std::string v;
    bool found = false;
    if (o_.store == nullptr ||
        !o_.store->try_get(rendezvous::launcher_keys::after_key(e.rank), &v, &found).ok() ||
        !found) {
      continue;
    }
    std::vector<int>& ranks = after[e.rank];
    for (std::size_t at = 0; at < v.size();) {
      const std::size_t comma = std::min(v.find(',', at), v.size());
      const int r = std::atoi(v.substr(at, comma - at).c_str());
      if (r >= 0 && r < static_cast<int>(workers_.size())) {
        ranks.push_back(r);
        waits_for_running = waits_for_running || !workers_[static_cast<size_t>(r)].exit;
      }
      at = comma + 1;
    }
  }
  if (waits_for_running && !cause_extended_ && !all_ended() && !stopping_) {
    // A rank the candidates' kolo names is still ending (its exit handlers, libtorch's
    // teardown): its exit is likelier the cause, so the window is held open for it, once
    // (on_end decides as soon as every rank named has ended).
    cause_extended_ = true;
    cause_deadline_ = Clock::now() + kCauseWindow * 4;
    for (const auto& [rank, ranks] : after) awaited_.insert(ranks.begin(), ranks.end());
    return;
  }
  cause_decided_ = true;
  cause_ = choose_cause(without_consequences(candidates_, after));
  if (!cause_) return;
  size_t at = 0;
  while (at < candidates_.size() && candidates_[at].rank != cause_->rank) ++at;
  const Worker& w = workers_[static_cast<size_t>(cause_->rank)];
  say(w.plan.remote && cause_->shim_lost ? exit_sentence(*cause_) : describe_exit(*cause_));
  const auto& lines = candidate_lines_[at];
  if (!lines.empty()) console_.message(2, last_lines_text(lines, std::to_string(cause_->rank)));
  if (all_ended() || stopping_) return;
  grace_deadline_ = Clock::now() + seconds_duration(o_.grace_seconds);
  if (o_.grace_seconds > 0) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "stopping the other workers in %g s (--grace-seconds)",
                  o_.grace_seconds);
    say(buf);
  } else {
    stop_all();
  }
}

void Job::on_user_signal(int sig) {
  if (user_signal_ != 0) {
    kill_all();  // a second Ctrl-C: the user does not want to wait
    return;
  }
  user_signal_ = sig;
  say(std::string("received ") + stop_signal_name(sig) + ", stopping the job");
  stop_all();
}

void Job::stop_all() {
  if (stopping_) return;
  stopping_ = true;
  for (Worker& w : workers_) stop_worker(&w);
  kill_deadline_ = Clock::now() + seconds_duration(o_.kill_after_seconds);
}

void Job::kill_all() {
  stopping_ = true;
  killed_ = true;
  for (Worker& w : workers_) kill_worker(&w);
}

bool Job::all_ended() const {
  for (const Worker& w : workers_) {
    if (!w.exit) return false;
  }
  return true;
}

std::optional<Deadline> Job::next_deadline() const {
  Deadlines d;
  d.consider(cause_deadline_, !cause_decided_);
  d.consider(grace_deadline_, !stopping_);
  d.consider(kill_deadline_, !killed_);
  for (const Worker& w : workers_) d.consider(w.drain_until, w.reaped && !w.exit.has_value());
  for (const Worker& w : workers_) {
    d.consider(w.drain_until, w.reaped && w.output && w.output->open());
  }
  return d.earliest();
}

void Job::on_deadlines() {
  const auto now = Clock::now();
  if (!cause_decided_ && cause_deadline_ && now >= *cause_deadline_) decide_cause();
  if (!stopping_ && grace_deadline_ && now >= *grace_deadline_) stop_all();
  if (stopping_ && !killed_ && kill_deadline_ && now >= *kill_deadline_) kill_all();
  for (Worker& w : workers_) {
    if (w.reaped && w.output && w.output->open() && now >= *w.drain_until) {
      stop_reading(&w, [&](int stream, std::string_view l) { on_line(&w, stream, l); });
    }
  }
}

int Job::exit_status() const {
  if (o_.parameter_server) {
    // The chief's, unless kolorun was interrupted and stopped it (or it never ended).
    if (chief_exit_ && chief_exit_->stop != Stop::kByJob) return chief_exit_->status();
    if (user_signal_ != 0) return 128 + user_signal_;
    return chief_exit_ ? chief_exit_->status() : 1;
  }
  if (cause_) return cause_->status();
  if (user_signal_ != 0) return 128 + user_signal_;
  for (const Worker& w : workers_) {
    if (w.exit && w.exit->failed()) return w.exit->status();  // stopped after a cause-less end
  }
  return 0;
}

}  // namespace

std::string exit_sentence(const WorkerExit& e) {
  std::string s =
      (e.name.empty() ? "rank " + std::to_string(e.rank) : e.name) + " (host " + e.host + ")";
  if (e.shim_lost) {
    return s + ": ssh exited with status " + std::to_string(e.exit_code) +
           " before the worker reported how it ended";
  }
  if (e.signal != 0) {
    const char* abbrev = sigabbrev_np(e.signal);
    s += " was killed by signal " + std::to_string(e.signal);
    if (abbrev != nullptr) s += std::string(" (SIG") + abbrev + ")";
    return s;
  }
  if (e.exit_code == 0) return s + " exited normally";
  return s + " exited with status " + std::to_string(e.exit_code);
}

int run_job(const JobOptions& options) {
  Job job(options);
  return job.run();
}

}  // namespace kolo::launcher
