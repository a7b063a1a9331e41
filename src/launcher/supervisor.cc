// kolorun's parent loop over mpirun (see supervisor.h).
#include "launcher/supervisor.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <optional>
#include <set>

#include "common/deadline.h"
#include "launcher/cause.h"
#include "launcher/event_loop.h"
#include "launcher/events.h"
#include "launcher/lines.h"
#include "launcher/process.h"

namespace kolo::launcher {
namespace {

// After the first failure report, how long kolorun collects others before it names the
// cause (unless every worker has been heard of sooner): the dead rank's own report often
// arrives after the survivors' (cause.h).
constexpr auto kCauseWindow = std::chrono::seconds(1);
// When mpirun ends the job by itself (a shim exited without lingering: it was killed, or
// stopped from outside), it names the process only after its own kill sequence (about
// 2 s): kolorun waits for that name this long at most.
constexpr auto kMpirunNamingWindow = std::chrono::seconds(5);

Clock::duration seconds(double s) { return seconds_duration(s); }

// Lines that the worker shims forwarded start with "[rank] ": the rank, else -1 (anything
// else on mpirun's output comes from mpirun itself).
int worker_rank(std::string_view line) {
  if (line.size() < 4 || line[0] != '[') return -1;
  size_t i = 1;
  int rank = 0;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9' && rank < (1 << 24)) {
    rank = rank * 10 + (line[i++] - '0');
  }
  return i > 1 && i + 1 < line.size() && line[i] == ']' && line[i + 1] == ' ' ? rank : -1;
}
bool is_worker_line(std::string_view line) { return worker_rank(line) >= 0; }

// The job's state; owned by the one thread of kolorun.
class Job {
 public:
  explicit Job(const SuperviseOptions& o) : o_(o), console_(o.terminal) {}

  int run();

 private:
  void say(const std::string& text) { console_.message(2, "kolorun: " + text + "\n"); }
  // A line of mpirun's stdout (fd 1) or stderr (fd 2) that is no exit marker.
  void pass_on(int fd, std::string_view line);
  void on_stderr_line(std::string_view line);
  void on_mpirun_line(std::string_view line);
  void on_marker(const WorkerExit& e);
  // A report that may be the cause arrived, or mpirun began to end the job by itself:
  // the cause is chosen `window` from now at the latest.
  void open_cause_window(Clock::duration window);
  // Chooses the cause once enough is known (see decide_cause).
  void maybe_decide_cause();
  // Chooses the cause from what has arrived, announces it and starts the grace period.
  void decide_cause();
  // Every worker has reported, or mpirun named it.
  bool all_heard_of() const;
  void on_user_signal(int sig);
  void stop(const char* why);
  // The nearest deadline to wake up for, if any.
  std::optional<Deadline> next_deadline() const;
  void on_deadlines();
  int exit_status();

  const SuperviseOptions& o_;
  Console console_;
  Child mpirun_;
  std::optional<int> mpirun_status_;  // wait() status once reaped
  // Failure reports that may be the cause (cause_weight > 0), in arrival order: markers,
  // and mpirun's reports of shims that never wrote one.
  std::vector<WorkerExit> candidates_;
  MpirunMessages mpirun_messages_;
  std::optional<Clock::time_point> cause_deadline_;  // choose the cause by then
  bool cause_decided_ = false;
  std::optional<WorkerExit> cause_;            // the worker whose failure ended the job
  std::optional<WorkerExit> stopped_failure_;  // first worker the job stopped without kolorun
  std::set<int> reported_;                     // ranks whose exit marker arrived
  std::set<int> named_by_mpirun_;              // ranks mpirun reported without a marker
  int user_signal_ = 0;                        // first SIGINT/SIGTERM/SIGHUP to kolorun
  bool stopping_ = false;                      // SIGTERM sent to mpirun
  bool killed_ = false;                        // SIGKILL sent to mpirun
  std::optional<Clock::time_point> grace_deadline_, kill_deadline_, finish_deadline_,
      drain_deadline_;
};

int Job::run() {
  const int signal_fd = route_signals_to_pipe({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  ::signal(SIGPIPE, SIG_IGN);
  SpawnOptions spawn;
  spawn.own_process_group = true;
  spawn.parent_death_signal = SIGTERM;  // if kolorun is killed, mpirun stops the job
  spawn.stdin_from_dev_null = true;     // in its own process group, a tty read would stop it
  if (Status s = spawn_piped(o_.mpirun_argv, spawn, &mpirun_); !s.ok()) {
    remove_job_dir(o_.shm_dir);
    say(s.message());
    say("multi-process jobs run through OpenMPI's mpirun: install the Debian package "
        "openmpi-bin (apt-get install openmpi-bin) or put mpirun on PATH");
    return 127;
  }
  // If kolorun is killed, PR_SET_PDEATHSIG sends mpirun SIGTERM; the guard makes sure
  // that it is gone 5 s later even if it ignored that.
  const pid_t guard = start_guard(mpirun_.pid, o_.kill_after_seconds, o_.shm_dir);
  // The shims have made each line its last update already (shim.h); the lines that
  // start with "\r" are updates to show in place.
  OutputReader output(mpirun_.out_fd, mpirun_.err_fd, LineSplitter::Returns::kKeep);
  auto to_stdout = [this](std::string_view line) { pass_on(1, line); };
  auto to_stderr = [this](std::string_view line) { on_stderr_line(line); };

  while (!mpirun_status_ || (output.open() && Clock::now() < *drain_deadline_)) {
    PollSet step;
    step.add(&output, to_stdout, to_stderr);
    step.add_signals(signal_fd, [this](const SignalEvent& e) { on_user_signal(e.signal); });
    if (Status s = step.wait(next_deadline()); !s.ok()) {
      say(s.message());
      stop("an internal error");
    }
    int status = 0;
    if (!mpirun_status_ && ::waitpid(mpirun_.pid, &status, WNOHANG) == mpirun_.pid) {
      mpirun_status_ = status;
      drain_deadline_ = Clock::now() + kDrainAfterExit;
    }
    on_deadlines();
  }
  output.finish(to_stdout, to_stderr);
  console_.finish();
  end_guard(guard);
  remove_job_dir(o_.shm_dir);
  return exit_status();
}

void Job::on_stderr_line(std::string_view line) {
  WorkerExit e;
  std::string before;
  if (find_exit_event(std::string(line), o_.event_token, &before, &e)) {
    // Text in front is another worker's unfinished line that mpirun forwarded first (it
    // holds no marker: this one is the first): passed on like any other line.
    if (!before.empty()) on_stderr_line(before);
    on_marker(e);
    return;
  }
  const bool from_worker = is_worker_line(line) ||
                           (line.size() > 1 && line[0] == '\r' && is_worker_line(line.substr(1)));
  if (!from_worker) on_mpirun_line(line);
  // Once kolorun has stopped the job, mpirun's own reports about processes it had to
  // terminate only repeat what kolorun already said.
  if (stopping_ && !from_worker) return;
  pass_on(2, line);
}

void Job::pass_on(int fd, std::string_view line) {
  if (console_.terminal() && line.size() > 1 && line[0] == '\r') {
    const int rank = worker_rank(line.substr(1));
    if (rank >= 0) {
      console_.redraw(fd, rank, line.substr(1));
      return;
    }
  }
  const int rank = worker_rank(line);
  console_.line(fd, rank >= 0 ? rank : Console::kKolorun, line);
}

void Job::on_mpirun_line(std::string_view line) {
  // Once kolorun stops the job, or has named the cause, mpirun's reports are consequences.
  if (stopping_ || cause_decided_) return;
  mpirun_messages_.feed(line);
  for (const WorkerExit& e : mpirun_messages_.take_named()) {
    if (reported_.count(e.rank) != 0) continue;  // its shim exited after its marker
    named_by_mpirun_.insert(e.rank);
    candidates_.push_back(e);
  }
  if (mpirun_messages_.aborting()) open_cause_window(kMpirunNamingWindow);
  maybe_decide_cause();
}

void Job::on_marker(const WorkerExit& e) {
  reported_.insert(e.rank);
  if (e.failed() && e.stop == Stop::kByJob && !stopping_) {
    // mpirun is ending the job without kolorun having asked (a shim exited at once: it was
    // killed, or stopped from outside): the process it names is the cause.
    if (!stopped_failure_) stopped_failure_ = e;
    if (!cause_decided_) open_cause_window(kMpirunNamingWindow);
  }
  if (cause_weight(e) > 0 && !cause_decided_ && (!stopping_ || cause_deadline_)) {
    candidates_.push_back(e);
    open_cause_window(kCauseWindow);
  }
  maybe_decide_cause();
  if (all_heard_of()) {
    if (cause_) {
      // The failed workers' shims linger until told to stop; nothing else is left to wait for.
      stop(nullptr);
    } else if (!finish_deadline_) {
      finish_deadline_ = Clock::now() + seconds(o_.finish_seconds);
    }
  }
}

void Job::open_cause_window(Clock::duration window) {
  const auto deadline = Clock::now() + window;
  if (!cause_deadline_ || (window > kCauseWindow && *cause_deadline_ < deadline)) {
    cause_deadline_ = deadline;
  }
}

bool Job::all_heard_of() const {
  std::set<int> heard = reported_;
  heard.insert(named_by_mpirun_.begin(), named_by_mpirun_.end());
  return static_cast<int>(heard.size()) >= o_.np;
}

void Job::maybe_decide_cause() {
  if (cause_decided_ || !cause_deadline_) return;
  // While mpirun ends the job by itself, the process it names is the one to wait for.
  const bool waiting_for_mpirun = mpirun_messages_.aborting() || stopped_failure_.has_value();
  if (all_heard_of() || (waiting_for_mpirun && !named_by_mpirun_.empty()) ||
      Clock::now() >= *cause_deadline_) {
    decide_cause();
  }
}

void Job::decide_cause() {
  if (cause_decided_) return;
  cause_decided_ = true;
  bool inferred = false;
  if (mpirun_status_ && (mpirun_messages_.aborting() || stopped_failure_)) {
    // mpirun ended the job by itself and has exited, so every marker that will come has
    // come. A worker without one, that mpirun did not name either, ended first: its shim
    // was killed (mpirun does not always name it). mpirun's own status is that of the
    // first process that failed. These come last, so a named cause is preferred.
    const size_t named = candidates_.size();
    for (int rank = 0; rank < o_.np; ++rank) {
      if (reported_.count(rank) != 0 || named_by_mpirun_.count(rank) != 0) continue;
      WorkerExit e;
      e.rank = rank;
      e.shim_lost = true;
      e.exit_code = std::max(1, shell_status(*mpirun_status_));
      candidates_.push_back(e);
    }
    cause_ = choose_cause(candidates_);
    inferred = cause_ && std::none_of(candidates_.begin(), candidates_.begin() + named,
                                      [&](const WorkerExit& e) { return e.rank == cause_->rank; });
  } else {
    cause_ = choose_cause(candidates_);
  }
  if (!cause_) return;
  if (inferred) {
    say("rank " + std::to_string(cause_->rank) +
        ": its worker shim ended without reporting (it was killed?); mpirun exited with "
        "status " +
        std::to_string(cause_->exit_code));
  } else {
    say(describe_exit(*cause_));
  }
  if (all_heard_of()) {
    stop(nullptr);
  } else if (!stopping_ && !mpirun_status_) {
    grace_deadline_ = Clock::now() + seconds(o_.grace_seconds);
    if (o_.grace_seconds > 0) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "stopping the other workers in %g s (--grace-seconds)",
                    o_.grace_seconds);
      say(buf);
    }
  }
}

void Job::on_user_signal(int sig) {
  if (user_signal_ != 0 || killed_) {
    // A second Ctrl-C: the user does not want to wait for a graceful stop.
    if (!killed_ && !mpirun_status_) ::kill(-mpirun_.pid, SIGKILL);
    killed_ = true;
    return;
  }
  user_signal_ = sig;
  say(std::string("received ") + stop_signal_name(sig) + ", stopping the job");
  stop(nullptr);
}

void Job::stop(const char* why) {
  if (stopping_ || mpirun_status_) return;
  if (why != nullptr) say(std::string("stopping the job: ") + why);
  stopping_ = true;
  ::kill(mpirun_.pid, SIGTERM);
  kill_deadline_ = Clock::now() + seconds(o_.kill_after_seconds);
}

std::optional<Deadline> Job::next_deadline() const {
  Deadlines d;
  d.consider(cause_deadline_, !cause_decided_);
  d.consider(grace_deadline_, !stopping_);
  d.consider(finish_deadline_, !stopping_);
  d.consider(kill_deadline_, !killed_);
  d.consider(drain_deadline_, mpirun_status_.has_value());
  return d.earliest();
}

void Job::on_deadlines() {
  const auto now = Clock::now();
  if (!cause_decided_ && cause_deadline_ && now >= *cause_deadline_) decide_cause();
  if (mpirun_status_) return;
  if (!stopping_ && grace_deadline_ && now >= *grace_deadline_) {
    stop(nullptr);
  }
  if (!stopping_ && finish_deadline_ && now >= *finish_deadline_) {
    stop("every worker finished but mpirun did not exit");
  }
  if (stopping_ && !killed_ && kill_deadline_ && now >= *kill_deadline_) {
    // mpirun leads its own process group: this also reaches the ssh sessions it started.
    ::kill(-mpirun_.pid, SIGKILL);
    killed_ = true;
  }
}

int Job::exit_status() {
  // Everything mpirun said is in: a cause still being collected is chosen now.
  if (!cause_decided_ && cause_deadline_) decide_cause();
  // A worker that failed before the user interrupted is the more useful answer.
  if (cause_) return cause_->status();
  if (user_signal_ != 0) return 128 + user_signal_;
  const int status = shell_status(*mpirun_status_);
  const int reported = static_cast<int>(reported_.size());
  if (reported < o_.np) {
    // Workers that never reported: their shim died, or mpirun could not start them (its
    // own messages above say which).
    say("mpirun " +
        (WIFSIGNALED(*mpirun_status_)
             ? "was killed by signal " + std::to_string(WTERMSIG(*mpirun_status_))
             : "exited with status " + std::to_string(status)) +
        " after " + std::to_string(reported) + " of " + std::to_string(o_.np) +
        " workers reported an exit status");
    return status != 0 ? status : 1;
  }
  if (stopped_failure_) {
    say(describe_exit(*stopped_failure_) + " after it was asked to stop");
    return stopped_failure_->status();
  }
  if (status != 0) {
    say("every worker exited with status 0 but mpirun exited with status " +
        std::to_string(status));
    return status;
  }
  return 0;
}

}  // namespace

int supervise(const SuperviseOptions& options) {
  Job job(options);
  return job.run();
}

}  // namespace kolo::launcher
