// WorkerProcess: one worker of kolorun's own launcher as a process: starting it (its
// environment, the secrets a remote wrapper reads from ssh's stdin, the group guard),
// taking a remote wrapper's exit marker out of its stderr, keeping its last lines, how it
// ended (its wait status, or its wrapper's marker), and stopping it.
//
// Shared by the job loop of a fixed job (job.h) and the elastic driver
// (elastic_driver.h), which both own a list of these in one poll() loop. Not for:
// deciding what a worker's end means for the job (job.h, elastic_driver.h) or what runs
// (worker_plan.h).
#pragma once

#include <sys/wait.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "launcher/events.h"
#include "launcher/lines.h"
#include "launcher/process.h"
#include "launcher/worker_plan.h"

namespace kolo::launcher {

struct WorkerProcess {
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

// What every worker of one job is started with.
struct StartContext {
  // Every local worker's environment before its own variables (worker_base_env).
  std::map<std::string, std::string> base_env;
  std::string rendezvous_secret;
  std::string event_token;  // of the remote wrappers' exit markers
  GroupGuard guard;
};

// kolorun's environment without what must not reach a worker: an outer job's secret and
// marker token, and with `drop_rank_variables` (a ps job) an outer job's ranks.
std::map<std::string, std::string> worker_base_env(bool drop_rank_variables);

// Spawns w->plan in a process group of its own that dies with kolorun, tells the guard,
// and passes a remote worker its secrets. On failure (the message says why) w is marked
// reaped and nothing runs.
Status start_worker(const StartContext& context, WorkerProcess* w);

// For a line the worker wrote on `stream` (1 or 2): takes a remote wrapper's exit marker
// out of it (into w->marker). Returns false when nothing of the line is left to show.
bool take_exit_marker(WorkerProcess* w, int stream, const std::string& token,
                      std::string_view* line);

// How many of a worker's last output lines kolorun keeps to repeat when it names it, and
// how long each may be.
inline constexpr size_t kLastLines = 10;
inline constexpr size_t kMaxRepeatedLine = 512;
void remember_line(WorkerProcess* w, std::string_view line);
// "kolorun: its last 2 lines (stdout and stderr):\nkolorun:   [LABEL] ...\n..." ("" for
// no lines).
std::string last_lines_text(const std::deque<std::string>& lines, const std::string& label);

// Records a reaped worker's wait status; its pipes are still read until `drain`.
void mark_reaped(WorkerProcess* w, int wait_status, Clock::duration drain);
// Reaps every child that ended (without waiting) and marks the one of `workers` it was;
// anything else reaped is something a worker left behind (kolorun is its sub-reaper).
template <typename Workers>
void reap_workers(Workers& workers, Clock::duration drain) {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    bool mine = false;
    for (WorkerProcess& w : workers) {
      if (w.child.pid == pid && !w.reaped) {
        mark_reaped(&w, status, drain);
        mine = true;
      }
    }
    if (!mine) note_foreign_exit(pid, status);  // a leftover, or the discovery script
  }
}
// A reaped worker whose pipes something it left behind still holds: passes on what is
// there (on_line(stream, line)), stops reading, and ends its process group.
void stop_reading(WorkerProcess* w, const std::function<void(int, std::string_view)>& on_line);

// Whether a reaped worker's end can be told now: a local one's at once, a remote one's
// once its marker came or its output is drained (it may still be in ssh's pipe).
bool end_known(const WorkerProcess& w);
// Its end, from its wrapper's marker or its wait status (requires reaped), with the rank
// and host of its plan and the time now.
WorkerExit exit_of(const WorkerProcess& w);

// Sends the worker's group SIGTERM (a remote one: closes its ssh stdin, upon which its
// wrapper does the same there; a SIGTERM to ssh would lose the wrapper's report).
void stop_worker(WorkerProcess* w);
// SIGKILL to its group.
void kill_worker(WorkerProcess* w);

}  // namespace kolo::launcher
