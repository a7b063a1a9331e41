// kolorun's own launcher: the workers' poll() loop (see job.h).
#include "launcher/job.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>

#include "common/deadline.h"
#include "core/config.h"
#include "launcher/cause.h"
#include "launcher/events.h"
#include "launcher/lines.h"
#include "launcher/process.h"

namespace kolo::launcher {
namespace {

// After a worker ended, how long its pipes are still read: something it left behind may
// hold them open for good. Shorter once the job is being stopped.
constexpr auto kDrainAfterExit = std::chrono::seconds(2);
constexpr auto kDrainWhenStopping = std::chrono::milliseconds(500);
// After the first failure, how long kolorun collects others before it names the cause
// (unless every worker ended sooner): cause.h.
constexpr auto kCauseWindow = std::chrono::seconds(1);
// A line repeated under the cause's message is cut to this.
constexpr size_t kMaxRepeatedLine = 512;

struct Worker {
  WorkerPlan plan;
  Child child;  // pid -1 when it could not be started
  std::unique_ptr<OutputReader> output;
  std::deque<std::string> last_lines;
  bool running = false;
  bool reaped = false;
  bool stopped_by_job = false;       // kolorun sent it SIGTERM (or closed its ssh stdin)
  std::optional<int> wait_status;    // once reaped
  std::optional<WorkerExit> marker;  // a remote wrapper's report
  std::optional<WorkerExit> exit;    // once its end is known
  std::optional<Clock::time_point> drain_until;
};

// The job's state; owned by kolorun's one thread.
class Job {
 public:
  explicit Job(const JobOptions& o) : o_(o), console_(o.terminal) {}
  int run();

 private:
  void say(const std::string& text) { console_.message(2, "kolorun: " + text + "\n"); }
  void start(Worker* w, const std::vector<std::string>& base_env);
  void on_line(Worker* w, int stream, std::string_view line);
  void on_redraw(Worker* w, int stream, std::string_view text);
  void reap();
  // Once a worker was reaped and its output is in (or its drain time passed): its end.
  void maybe_finish(Worker* w);
  void on_end(Worker* w, WorkerExit e);
  void publish(const WorkerExit& e);
  void decide_cause();
  void on_user_signal(int sig);
  void stop_all();
  void kill_all();
  bool all_ended() const;
  const Clock::time_point* next_deadline();
  void on_deadlines();
  int exit_status() const;

  const JobOptions& o_;
  Console console_;
  std::vector<Worker> workers_;
  GroupGuard guard_;
  std::vector<WorkerExit> candidates_;  // failures that may be the cause, in order
  std::vector<std::deque<std::string>> candidate_lines_;
  std::optional<Clock::time_point> cause_deadline_, grace_deadline_, kill_deadline_;
  bool cause_decided_ = false;
  std::optional<WorkerExit> cause_;
  int user_signal_ = 0;
  bool stopping_ = false, killed_ = false;
  bool publish_failed_ = false;
  Clock::time_point wake_;
};

int Job::run() {
  const int signal_fd = route_signals_to_pipe({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  ::signal(SIGPIPE, SIG_IGN);
  // What a worker leaves behind when it exits (a daemon that called setsid(), say)
  // becomes kolorun's child, and is ended with the job (end_descendants).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  guard_ = start_group_guard(o_.kill_after_seconds);
  std::vector<std::string> base_env;
  for (const auto& [name, value] : core::process_env()) {
    // An outer job's secret must not leak in, nor kolorun's marker token.
    if (name != kRendezvousSecretVar && name != kTokenVar) base_env.push_back(name + "=" + value);
  }
  workers_.resize(o_.workers.size());
  for (size_t i = 0; i < workers_.size(); ++i) {
    workers_[i].plan = o_.workers[i];
    start(&workers_[i], base_env);
  }

  auto open = [this] {
    for (const Worker& w : workers_) {
      if (w.running || (w.output && w.output->open())) return true;
    }
    return false;
  };
  while (open() || !all_ended()) {
    std::vector<struct pollfd> fds = {{signal_fd, POLLIN, 0}};
    for (const Worker& w : workers_) {
      if (w.output) w.output->add_to(&fds);
    }
    const int r = ::poll(fds.data(), fds.size(), poll_timeout_ms(next_deadline()));
    if (r < 0 && errno != EINTR) {
      say(std::string("poll: ") + std::strerror(errno));
      stop_all();
    }
    for (Worker& w : workers_) {
      if (!w.output) continue;
      w.output->service(
          fds, [&](std::string_view line) { on_line(&w, 1, line); },
          [&](std::string_view line) { on_line(&w, 2, line); },
          [&](std::string_view text) { on_redraw(&w, 1, text); },
          [&](std::string_view text) { on_redraw(&w, 2, text); });
    }
    for (const auto& e : read_signal_events(signal_fd)) {
      if (e.signal != SIGCHLD) on_user_signal(e.signal);
    }
    reap();
    for (Worker& w : workers_) maybe_finish(&w);
    on_deadlines();
  }
  if (!cause_decided_ && cause_deadline_) decide_cause();
  console_.finish();
  end_descendants(std::chrono::milliseconds(500));
  end_group_guard(&guard_);
  return exit_status();
}

void Job::start(Worker* w, const std::vector<std::string>& base_env) {
  std::vector<std::string> env = base_env;
  if (!w->plan.remote) {
    for (const auto& [name, value] : w->plan.vars) env.push_back(name + "=" + value);
    env.push_back(std::string(kRendezvousSecretVar) + "=" + o_.rendezvous_secret);
  }
  SpawnOptions spawn;
  spawn.own_process_group = true;
  spawn.parent_death_signal = SIGKILL;  // if kolorun dies, so do its workers
  spawn.environment = &env;
  if (w->plan.remote) {
    spawn.stdin_pipe = true;  // the secrets, then open until the worker is to stop
  } else {
    spawn.stdin_from_dev_null = true;  // in its own group, a tty read would stop it
  }
  if (Status s = spawn_piped(w->plan.argv, spawn, &w->child); !s.ok()) {
    say("rank " + std::to_string(w->plan.rank) + " (host " + w->plan.host + "): " + s.message());
    w->reaped = true;
    WorkerExit e;
    e.rank = w->plan.rank;
    e.host = w->plan.host;
    e.exit_code = 127;  // what a shell reports for a program it cannot run
    on_end(w, e);
    return;
  }
  w->running = true;
  guard_add(guard_, w->child.pid);
  w->output = std::make_unique<OutputReader>(w->child.out_fd, w->child.err_fd);
  if (w->plan.remote) {
    std::map<std::string, std::string> secrets = {{kRendezvousSecretVar, o_.rendezvous_secret},
                                                  {kTokenVar, o_.event_token}};
    // Small (far below a pipe's 64 KiB), so this write does not block.
    if (!write_all(w->child.in_fd, secrets_header(secrets))) {
      say("rank " + std::to_string(w->plan.rank) + ": could not pass the job secret to ssh");
    }
  }
}

void Job::on_line(Worker* w, int stream, std::string_view line) {
  if (w->plan.remote && stream == 2) {
    WorkerExit e;
    std::string before;
    if (find_exit_event(std::string(line), o_.event_token, &before, &e)) {
      w->marker = e;
      if (before.empty()) return;
      line = before;  // cannot happen with whole lines; shown rather than lost
    }
  }
  std::string text = "[" + std::to_string(w->plan.rank) + "] ";
  text.append(line);
  console_.line(stream, w->plan.rank, text);
  w->last_lines.emplace_back(line.substr(0, kMaxRepeatedLine));
  if (w->last_lines.size() > kLastLines) w->last_lines.pop_front();
}

void Job::on_redraw(Worker* w, int stream, std::string_view text) {
  // Not kept in last_lines: only the line it ends as is.
  std::string shown = "[" + std::to_string(w->plan.rank) + "] ";
  shown.append(text);
  console_.redraw(stream, w->plan.rank, shown);
}

void Job::reap() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (Worker& w : workers_) {
      if (w.child.pid != pid || w.reaped) continue;
      w.reaped = true;
      w.running = false;
      w.wait_status = status;
      w.drain_until = Clock::now() + (stopping_ ? kDrainWhenStopping : kDrainAfterExit);
      if (w.child.in_fd >= 0) ::close(w.child.in_fd), w.child.in_fd = -1;
    }
    // Anything else is something a worker left behind (we are its sub-reaper).
  }
}

void Job::maybe_finish(Worker* w) {
  if (!w->reaped || w->exit || !w->wait_status) return;
  const bool drained = !w->output->open() || Clock::now() >= *w->drain_until;
  // A local worker's status is known at once; a remote one's comes in its marker, which
  // may still be in ssh's pipe.
  if (w->plan.remote && !drained) return;
  if (drained && w->output->open()) {
    // Something it left behind holds its pipes: stop reading, and end its group.
    w->output->finish([&](std::string_view l) { on_line(w, 1, l); },
                      [&](std::string_view l) { on_line(w, 2, l); });
    ::kill(-w->child.pid, SIGTERM);
  }
  WorkerExit e;
  e.rank = w->plan.rank;
  e.host = w->plan.host;
  const int status = *w->wait_status;
  if (w->plan.remote && w->marker) {
    e = *w->marker;
    e.rank = w->plan.rank;
    e.host = w->plan.host;
  } else if (w->plan.remote) {
    // ssh ended without the wrapper's report: ssh failed (255), or the wrapper was lost.
    e.shim_lost = true;
    e.exit_code = std::max(1, shell_status(status));
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  } else {
    e.exit_code = shell_status(status);
  }
  e.time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  on_end(w, e);
}

void Job::on_end(Worker* w, WorkerExit e) {
  e.stop = w->stopped_by_job && e.failed() ? Stop::kByJob : Stop::kNone;
  w->exit = e;
  publish(e);
  if (!cause_decided_ && cause_weight(e) > 0 && !stopping_) {
    candidates_.push_back(e);
    candidate_lines_.push_back(w->last_lines);
    if (!cause_deadline_) cause_deadline_ = Clock::now() + kCauseWindow;
  }
  if (cause_deadline_ && !cause_decided_ && all_ended()) decide_cause();
}

void Job::publish(const WorkerExit& e) {
  if (o_.store == nullptr || publish_failed_) return;
  // The value first: a reader woken by the counter finds the text there.
  Status s = o_.store->set("launcher/exit/" + std::to_string(e.rank), exit_sentence(e));
  std::int64_t total = 0;
  if (s.ok()) s = o_.store->add("launcher/exits", 1, &total);
  if (!s.ok()) {
    publish_failed_ = true;  // the store is in this process: it will not come back
    say("warning: could not publish rank " + std::to_string(e.rank) +
        "'s end in the job's store: " + s.message());
  }
}

void Job::decide_cause() {
  if (cause_decided_) return;
  cause_decided_ = true;
  cause_ = choose_cause(candidates_);
  if (!cause_) return;
  size_t at = 0;
  while (at < candidates_.size() && candidates_[at].rank != cause_->rank) ++at;
  const Worker& w = workers_[static_cast<size_t>(cause_->rank)];
  say(w.plan.remote && cause_->shim_lost ? exit_sentence(*cause_) : describe_exit(*cause_));
  const auto& lines = candidate_lines_[at];
  if (!lines.empty()) {
    std::string text = "kolorun: its last " + std::to_string(lines.size()) +
                       (lines.size() == 1 ? " line" : " lines") + " (stdout and stderr):\n";
    for (const auto& l : lines)
      text += "kolorun:   [" + std::to_string(cause_->rank) + "] " + l + "\n";
    console_.message(2, text);
  }
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
  for (Worker& w : workers_) {
    if (!w.running) continue;
    w.stopped_by_job = true;
    if (w.plan.remote) {
      // Its wrapper stops the program when its stdin closes; a SIGTERM to ssh would lose
      // the wrapper's report.
      if (w.child.in_fd >= 0) ::close(w.child.in_fd), w.child.in_fd = -1;
    } else {
      ::kill(-w.child.pid, SIGTERM);
    }
  }
  kill_deadline_ = Clock::now() + seconds_duration(o_.kill_after_seconds);
}

void Job::kill_all() {
  stopping_ = true;
  killed_ = true;
  for (Worker& w : workers_) {
    if (!w.running) continue;
    w.stopped_by_job = true;
    ::kill(-w.child.pid, SIGKILL);
  }
}

bool Job::all_ended() const {
  for (const Worker& w : workers_) {
    if (!w.exit) return false;
  }
  return true;
}

const Clock::time_point* Job::next_deadline() {
  std::optional<Clock::time_point> best;
  auto consider = [&](const std::optional<Clock::time_point>& d, bool active) {
    if (active && d && (!best || *d < *best)) best = d;
  };
  consider(cause_deadline_, !cause_decided_);
  consider(grace_deadline_, !stopping_);
  consider(kill_deadline_, !killed_);
  for (const Worker& w : workers_) consider(w.drain_until, w.reaped && !w.exit.has_value());
  for (const Worker& w : workers_) {
    consider(w.drain_until, w.reaped && w.output && w.output->open());
  }
  if (!best) return nullptr;
  wake_ = *best;
  return &wake_;
}

void Job::on_deadlines() {
  const auto now = Clock::now();
  if (!cause_decided_ && cause_deadline_ && now >= *cause_deadline_) decide_cause();
  if (!stopping_ && grace_deadline_ && now >= *grace_deadline_) stop_all();
  if (stopping_ && !killed_ && kill_deadline_ && now >= *kill_deadline_) kill_all();
  for (Worker& w : workers_) {
    if (w.reaped && w.output && w.output->open() && now >= *w.drain_until) {
      w.output->finish([&](std::string_view l) { on_line(&w, 1, l); },
                       [&](std::string_view l) { on_line(&w, 2, l); });
      ::kill(-w.child.pid, SIGTERM);
    }
  }
}

int Job::exit_status() const {
  if (cause_) return cause_->status();
  if (user_signal_ != 0) return 128 + user_signal_;
  for (const Worker& w : workers_) {
    if (w.exit && w.exit->failed()) return w.exit->status();  // stopped after a cause-less end
  }
  return 0;
}

}  // namespace

std::string exit_sentence(const WorkerExit& e) {
  std::string s = "rank " + std::to_string(e.rank) + " (host " + e.host + ")";
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
