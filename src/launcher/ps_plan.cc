// A parameter-server job's tasks, ports, TF_CONFIGs and variables (see ps_plan.h).
#include "launcher/ps_plan.h"

#include <map>

#include "common/format.h"
#include "launcher/events.h"
#include "launcher/layout.h"
#include "launcher/threads.h"
#include "startup/tf_config.h"

namespace kolo::launcher {
namespace {

// "1 chief, 2 workers, 2 ps tasks and 1 evaluator".
std::string describe_shape(const LaunchRequest& r) {
  auto plural = [](int n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::string s = "1 chief, " + plural(r.np, "worker", "workers");
  s += (r.evaluator ? ", " : " and ") + plural(r.ps, "ps task", "ps tasks");
  if (r.evaluator) s += " and 1 evaluator";
  return s;
}

bool is_secret(const std::string& name) {
  return name == kRendezvousSecretVar || name == kTokenVar;
}

}  // namespace

bool is_rank_variable(const std::string& name) {
  for (const char* v : {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE",
                        "KOLO_CROSS_RANK", "KOLO_CROSS_SIZE", kHostSlotsVar}) {
    if (name == v) return true;
  }
  return false;
}

Status validate_ps_job(const LaunchRequest& r) {
  const std::string usage =
      " A parameter-server job needs -np M workers (M >= 1) and --ps N ps tasks (N >= 1): "
      "kolorun --ps N -np M [--evaluator] PROGRAM [ARGS...]";
  // TensorFlow checks the workers first (ParameterServerStrategy's _verify_args_and_config).
  if (r.np < 1) {
    return InvalidArgument("--ps " + std::to_string(r.ps) + " with -np " + std::to_string(r.np) +
                           ": " + core::kNoWorkerMessage + usage);
  }
  if (r.ps < 1) {
    return InvalidArgument("--ps " + std::to_string(r.ps) + ": " + core::kNoPsMessage + usage);
  }
  if (r.program.empty() || r.program[0].empty()) {
    return InvalidArgument("no program given: usage is kolorun --ps N -np M PROGRAM [ARGS...]");
  }
  if (!r.hosts.empty()) {
    const int slots = total_slots(r.hosts);
    const int tasks = ps_task_count(r);
    if (tasks > slots) {
      return InvalidArgument("a parameter-server job of " + describe_shape(r) + " needs " +
                             std::to_string(tasks) + " slots but " + r.hosts_source + " has " +
                             std::to_string(slots) + " (" + format_host_list(r.hosts) +
                             "); add hosts or slots, or lower -np or --ps");
    }
  }
  if (r.max_restarts < 0 || r.max_restarts > kMaxRestartsLimit) {
    return InvalidArgument("--max-restarts " + std::to_string(r.max_restarts) +
                           " is not valid: expected 0 to " + std::to_string(kMaxRestartsLimit));
  }
  if (!(r.grace_seconds >= 0 && r.grace_seconds <= 86400)) {
    return InvalidArgument("--grace-seconds must be between 0 and 86400");
  }
  return Status::OK();
}

int ps_task_count(const LaunchRequest& r) { return 1 + r.np + r.ps + (r.evaluator ? 1 : 0); }

std::vector<PsTask> place_ps_tasks(const LaunchRequest& r,
                                   const std::vector<std::string>& this_host_names,
                                   const std::string& this_host_addr) {
  std::vector<PsTask> tasks;
  auto add = [&](const char* type, int count) {
    for (int i = 0; i < count; ++i) {
      PsTask t;
      t.type = type;
      t.index = i;
      t.rank = static_cast<int>(tasks.size());
      tasks.push_back(t);
    }
  };
  add("chief", 1);
  add("worker", r.np);
  add("ps", r.ps);
  add("evaluator", r.evaluator ? 1 : 0);
  const std::vector<int> layout = fill_hosts(r.hosts, static_cast<int>(tasks.size()));
  size_t next = 0;
  for (size_t h = 0; h < layout.size(); ++h) {
    const std::string host = r.hosts.empty() ? "localhost" : r.hosts[h].host;
    const bool remote = !r.hosts.empty() && !is_this_host(host, this_host_names);
    for (int i = 0; i < layout[h]; ++i, ++next) {
      tasks[next].host = host;
      tasks[next].remote = remote;
      tasks[next].addr_host = remote ? host : this_host_addr;
    }
  }
  return tasks;
}

int local_ports_needed(const std::vector<PsTask>& tasks) {
  int n = 0;
  for (const auto& t : tasks) n += !t.remote && t.in_cluster();
  return n;
}

void assign_ports(const std::vector<int>& local_ports, int remote_base,
                  std::vector<PsTask>* tasks) {
  size_t local = 0;
  std::map<std::string, int> next_remote;  // per host
  for (PsTask& t : *tasks) {
    if (!t.in_cluster()) {
      t.port = 0;
    } else if (!t.remote) {
      t.port = local < local_ports.size() ? local_ports[local++] : 0;
    } else {
      auto [it, fresh] = next_remote.emplace(t.host, remote_base);
      t.port = it->second++;
    }
  }
}

std::string ps_tf_config(const std::vector<PsTask>& tasks, size_t i) {
  std::string cluster;
  for (const char* type : {"chief", "worker", "ps"}) {
    std::string list;
    for (const auto& t : tasks) {
      if (t.type != type) continue;
      list += (list.empty() ? "" : ",") + json_quoted(host_port(t.addr_host, t.port));
    }
    if (list.empty()) continue;
    cluster += (cluster.empty() ? "" : ",") + json_quoted(type) + ":[" + list + "]";
  }
  return "{\"cluster\":{" + cluster + "},\"task\":{\"type\":" + json_quoted(tasks[i].type) +
         ",\"index\":" + std::to_string(tasks[i].index) + "}}";
}

std::vector<WorkerPlan> plan_ps_tasks(const LaunchRequest& r, const PlanInputs& in,
                                      const std::vector<PsTask>& tasks) {
  std::map<std::string, int> per_host;
  for (const auto& t : tasks) ++per_host[t.host];
  std::vector<WorkerPlan> plans;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const PsTask& t = tasks[i];
    WorkerPlan p;
    p.rank = t.rank;
    p.host = t.host;
    p.remote = t.remote;
    p.task_type = t.type;
    p.task_index = t.index;
    if (t.remote) {
      for (const auto& name : exported_variables(in.env)) {
        if (!is_secret(name) && !is_rank_variable(name)) p.vars[name] = in.env.at(name);
      }
    }
    p.vars[kTfConfigVar] = ps_tf_config(tasks, i);
    p.vars[kTaskTypeVar] = t.type;
    p.vars[kTaskIndexVar] = std::to_string(t.index);
    p.vars[kRendezvousAddrVar] = in.rendezvous_addr;
    p.vars[kHostAddrVar] = t.addr_host;
    p.vars["KOLO_LOCAL_SIZE"] = std::to_string(per_host[t.host]);
    if (!t.remote) {
      if (auto threads = worker_threads_value(in.cores, per_host[t.host], in.env)) {
        p.vars[kThreadsVar] = *threads;
      }
      p.argv = r.program;
    } else {
      p.argv =
          ssh_argv(t.host, in.ssh_port,
                   remote_shell_command(in.cwd, p.vars, in.self_exe, r.program), in.ssh_options);
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

}  // namespace kolo::launcher
