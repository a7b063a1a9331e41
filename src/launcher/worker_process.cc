// One worker process of kolorun's own launcher (see worker_process.h).
#include "launcher/worker_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "launcher/ps_plan.h"
#include "startup/config.h"

namespace kolo::launcher {

std::map<std::string, std::string> worker_base_env(bool drop_rank_variables) {
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : core::process_env()) {
    if (name == kRendezvousSecretVar || name == kTokenVar) continue;
    if (drop_rank_variables && is_rank_variable(name)) continue;
    env[name] = value;
  }
  return env;
}

Status start_worker(const StartContext& context, WorkerProcess* w) {
  // One entry per name (the worker's own values win over kolorun's environment: getenv
  // would return the first of two).
  std::map<std::string, std::string> vars = context.base_env;
  if (!w->plan.remote) {
    for (const auto& [name, value] : w->plan.vars) vars[name] = value;
    vars[kRendezvousSecretVar] = context.rendezvous_secret;
  }
  std::vector<std::string> env;
  for (const auto& [name, value] : vars) env.push_back(name + "=" + value);
  SpawnOptions spawn;
  spawn.own_process_group = true;
  spawn.parent_death_signal = SIGKILL;  // if kolorun dies, so do its workers
  spawn.environment = &env;
  if (w->plan.remote) {
    spawn.stdin_pipe = true;  // the secrets, then open until the worker is to stop
  } else {
    spawn.stdin_from_dev_null = true;  // in its own group, a tty read would stop it
    spawn.stdout_terminal = true;      // printf lines as printed (a remote one: ssh's side)
  }
  if (Status s = spawn_piped(w->plan.argv, spawn, &w->child); !s.ok()) {
    w->reaped = true;
    return s;
  }
  w->running = true;
  guard_add(context.guard, w->child.pid);
  w->output = std::make_unique<OutputReader>(w->child.out_fd, w->child.err_fd);
  if (w->plan.remote) {
    std::map<std::string, std::string> secrets = {{kRendezvousSecretVar, context.rendezvous_secret},
                                                  {kTokenVar, context.event_token}};
    // Small (far below a pipe's 64 KiB), so this write does not block.
    if (!write_all(w->child.in_fd, secrets_header(secrets))) {
      return InvalidArgument("could not pass the job secret to ssh");
    }
  }
  return Status::OK();
}

bool take_exit_marker(WorkerProcess* w, int stream, const std::string& token,
                      std::string_view* line) {
  if (!w->plan.remote || stream != 2) return true;
  WorkerExit e;
  std::string before;
  if (!find_exit_event(std::string(*line), token, &before, &e)) return true;
  w->marker = e;
  // Text before it cannot happen with whole lines; shown rather than lost.
  *line = line->substr(0, before.size());
  return !before.empty();
}

void remember_line(WorkerProcess* w, std::string_view line) {
  w->last_lines.emplace_back(line.substr(0, kMaxRepeatedLine));
  if (w->last_lines.size() > kLastLines) w->last_lines.pop_front();
}

std::string last_lines_text(const std::deque<std::string>& lines, const std::string& label) {
  if (lines.empty()) return "";
  std::string text = "kolorun: its last " + std::to_string(lines.size()) +
                     (lines.size() == 1 ? " line" : " lines") + " (stdout and stderr):\n";
  for (const auto& l : lines) text += "kolorun:   [" + label + "] " + l + "\n";
  return text;
}

void mark_reaped(WorkerProcess* w, int wait_status, Clock::duration drain) {
  w->reaped = true;
  w->running = false;
  w->wait_status = wait_status;
  w->drain_until = Clock::now() + drain;
  if (w->child.in_fd >= 0) ::close(w->child.in_fd), w->child.in_fd = -1;
}

void stop_reading(WorkerProcess* w, const std::function<void(int, std::string_view)>& on_line) {
  w->output->finish([&](std::string_view l) { on_line(1, l); },
                    [&](std::string_view l) { on_line(2, l); });
  ::kill(-w->child.pid, SIGTERM);
}

bool end_known(const WorkerProcess& w) {
  if (!w.reaped || w.exit || !w.wait_status) return false;
  const bool drained = !w.output->open() || Clock::now() >= *w.drain_until;
  return !w.plan.remote || drained;
}

WorkerExit exit_of(const WorkerProcess& w) {
  WorkerExit e;
  const int status = *w.wait_status;
  if (w.plan.remote && w.marker) {
    e = *w.marker;
  } else if (w.plan.remote) {
    // ssh ended without the wrapper's report: ssh failed (255), or the wrapper was lost.
    e.shim_lost = true;
    e.exit_code = std::max(1, shell_status(status));
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  } else {
    e.exit_code = shell_status(status);
  }
  e.rank = w.plan.rank;
  e.host = w.plan.host;
  e.time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  return e;
}

void stop_worker(WorkerProcess* w) {
  if (!w->running) return;
  w->stopped_by_job = true;
  if (w->plan.remote) {
    if (w->child.in_fd >= 0) ::close(w->child.in_fd), w->child.in_fd = -1;
  } else {
    ::kill(-w->child.pid, SIGTERM);
  }
}

void kill_worker(WorkerProcess* w) {
  if (!w->running) return;
  w->stopped_by_job = true;
  ::kill(-w->child.pid, SIGKILL);
}

}  // namespace kolo::launcher
