// An elastic job's hosts and workers (elastic_driver.h): the host discovery script run with
// a bound, the first plan, and one worker's plan in a generation. Not for: the driver's
// loop (elastic_driver.cc).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <thread>

#include "common/format.h"
#include "launcher/elastic_driver.h"
#include "launcher/event_loop.h"
#include "launcher/lines.h"
#include "launcher/process.h"
#include "launcher/worker_process.h"

namespace kolo::launcher {

Status run_discovery_script(const std::string& script, int default_slots, double timeout_s,
                            std::vector<HostSlots>* out) {
  const std::string name = "the host discovery script '" + script + "'";
  Child child;
  SpawnOptions spawn;
  spawn.own_process_group = true;
  spawn.parent_death_signal = SIGKILL;
  spawn.stdin_from_dev_null = true;
  if (Status s = spawn_piped({"sh", "-c", script}, spawn, &child); !s.ok()) {
    return InvalidArgument(name + " cannot run: " + s.message());
  }
  OutputReader output(child.out_fd, child.err_fd, LineSplitter::Returns::kKeep);
  std::string text, err;
  const Deadline deadline = deadline_after(timeout_s);
  std::optional<int> status;
  bool timed_out = false;
  while (!status || output.open()) {
    PollSet step;
    step.add(
        &output, [&](std::string_view l) { text.append(l).push_back('\n'); },
        [&](std::string_view l) { err.assign(l); });
    // Every 20 ms at least, for the status the driver's loop may have reaped.
    if (!step.wait(std::min(deadline, Clock::now() + std::chrono::milliseconds(20))).ok()) break;
    int st = 0;
    // The driver's loop reaps every child (waitpid(-1)) and keeps the script's status.
    if (!status &&
        (::waitpid(child.pid, &st, WNOHANG) == child.pid || take_foreign_exit(child.pid, &st))) {
      status = st;
    }
    if (Clock::now() >= deadline) {
      timed_out = !status;
      ::kill(-child.pid, SIGKILL);  // and whatever it started that holds the pipes
      if (!status) {
        // SIGKILL: returns at once (or the loop took it: then it is noted soon).
        if (::waitpid(child.pid, &st, 0) != child.pid) {
          const Deadline by = deadline_after(1);
          while (!take_foreign_exit(child.pid, &st) && Clock::now() < by) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }
        status = st;
      }
      break;
    }
  }
  output.finish([&](std::string_view l) { text.append(l).push_back('\n'); },
                [&](std::string_view l) { err.assign(l); });
  const std::string said = err.empty() ? "" : " (its last stderr line: " + err + ")";
  if (timed_out) {
    return InvalidArgument(name + " did not finish within " + number_string(timeout_s) + " s" +
                           said);
  }
  if (shell_status(*status) != 0) {
    return InvalidArgument(name + " exited with status " + std::to_string(shell_status(*status)) +
                           said);
  }
  if (Status s = parse_discovery_output(text, default_slots, out); !s.ok()) {
    return InvalidArgument(name + " printed something that is not a host: " + s.message());
  }
  return Status::OK();
}

PlanResult first_plan(const ElasticOptions& options) {
  PlanRequest request;
  request.hosts = options.hosts;
  request.min_np = options.min_np;
  request.max_np = options.max_np > 0 ? options.max_np : options.start_np;
  return next_plan(request);
}

WorkerPlan elastic_worker_plan(const ElasticOptions& options, const std::vector<PlanMember>& plan,
                               int rank, int generation) {
  const PlanMember& m = plan[static_cast<size_t>(rank)];
  WorkerRanks ranks;
  ranks.rank = rank;
  ranks.size = static_cast<int>(plan.size());
  ranks.local_rank = m.local_rank;
  ranks.local_size = m.local_size;
  ranks.cross_rank = m.cross_rank;
  ranks.cross_size = m.cross_size;
  const bool remote = !is_this_host(m.host, options.inputs.this_host_names);
  const std::map<std::string, std::string> vars = {
      {kElasticVar, "1"},
      {kElasticIdVar, std::to_string(m.id)},
      {kElasticGenerationVar, std::to_string(generation)},
      {kElasticTimeoutVar, number_string(options.elastic_timeout_s)},
  };
  return plan_one_worker(m.host, remote, ranks, vars, options.program, options.inputs);
}

}  // namespace kolo::launcher
