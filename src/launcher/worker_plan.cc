// Worker commands and environments for kolorun's own launcher (see worker_plan.h).
#include "launcher/worker_plan.h"

#include <arpa/inet.h>

#include "launcher/events.h"
#include "launcher/layout.h"
#include "launcher/shim.h"
#include "launcher/threads.h"

namespace kolo::launcher {
namespace {

bool is_secret(const std::string& name) {
  return name == kRendezvousSecretVar || name == kTokenVar;
}

}  // namespace

WorkerPlan plan_one_worker(const std::string& host, bool remote, const WorkerRanks& ranks,
                           const std::map<std::string, std::string>& vars,
                           const std::vector<std::string>& program, const PlanInputs& in) {
  WorkerPlan p;
  p.rank = ranks.rank;
  p.host = host;
  p.remote = remote;
  if (remote) {
    // Other hosts get what mpirun would export (KOLO_*, PATH, LD_LIBRARY_PATH); the
    // per-job variables below replace stale ones from an outer job.
    for (const auto& name : exported_variables(in.env)) {
      if (!is_secret(name)) p.vars[name] = in.env.at(name);
    }
  }
  for (auto& [name, value] : rank_variables(ranks)) p.vars[name] = value;
  for (const auto& [name, value] : vars) p.vars[name] = value;
  p.vars[kRendezvousAddrVar] = in.rendezvous_addr;
  p.vars[kHostAddrVar] = remote ? host : in.this_host_addr;
  if (!remote) {
    // A remote worker's wrapper sets this there, from that host's cores.
    if (auto threads = worker_threads_value(in.cores, ranks.local_size, in.env)) {
      p.vars[kThreadsVar] = *threads;
    }
    p.argv = program;
  } else {
    p.argv = ssh_argv(host, in.ssh_port, remote_shell_command(in.cwd, p.vars, in.self_exe, program),
                      in.ssh_options);
  }
  return p;
}

std::vector<WorkerPlan> plan_workers(const LaunchRequest& request, const PlanInputs& in) {
  const std::vector<int> layout = fill_hosts(request.hosts, request.np);
  std::vector<WorkerPlan> plans;
  int rank = 0;
  for (size_t h = 0; h < layout.size(); ++h) {
    const std::string host = request.hosts.empty() ? "localhost" : request.hosts[h].host;
    const bool remote = !request.hosts.empty() && !is_this_host(host, in.this_host_names);
    for (int i = 0; i < layout[h]; ++i, ++rank) {
      WorkerRanks ranks;
      (void)compute_ranks(layout, rank, &ranks);  // cannot fail: rank < the layout's sum
      plans.push_back(plan_one_worker(host, remote, ranks, {{kHostSlotsVar, format_layout(layout)}},
                                      request.program, in));
    }
  }
  return plans;
}

std::string worker_label(const WorkerPlan& p) {
  if (p.task_type.empty()) return std::to_string(p.rank);
  return p.task_type + ":" + std::to_string(p.task_index);
}

std::string worker_name(const WorkerPlan& p) {
  if (p.task_type.empty()) return "rank " + std::to_string(p.rank);
  return p.task_type + " " + std::to_string(p.task_index);
}

std::string remote_shell_command(const std::string& cwd,
                                 const std::map<std::string, std::string>& vars,
                                 const std::string& self_exe,
                                 const std::vector<std::string>& program) {
  std::vector<std::string> words = {"env"};
  for (const auto& [name, value] : vars) words.push_back(name + "=" + value);
  words.insert(words.end(), {self_exe, "--remote-worker", "--"});
  words.insert(words.end(), program.begin(), program.end());
  return "cd " + shell_join({cwd}) + " && exec " + shell_join(words);
}

std::vector<std::string> ssh_argv(const std::string& host, int port, const std::string& command,
                                  const std::vector<std::string>& options) {
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes"};
  if (port > 0) argv.insert(argv.end(), {"-p", std::to_string(port)});
  argv.insert(argv.end(), options.begin(), options.end());
  // "--": a host name is never read as an option (hosts.h refuses a leading '-' too).
  argv.insert(argv.end(), {"--", host, command});
  return argv;
}

std::string secrets_header(const std::map<std::string, std::string>& secrets) {
  std::string s;
  for (const auto& [name, value] : secrets) s += name + "=" + value + "\n";
  return s + "\n";
}

bool parse_secret_line(const std::string& line, std::string* name, std::string* value) {
  const size_t eq = line.find('=');
  if (eq == std::string::npos || line.rfind("KOLO_", 0) != 0) return false;
  *name = line.substr(0, eq);
  *value = line.substr(eq + 1);
  return name->size() > 5;
}

std::optional<std::string> rendezvous_host(const std::vector<HostSlots>& hosts,
                                           const std::vector<std::string>& this_host_names,
                                           const std::string& override_addr) {
  if (!override_addr.empty()) return override_addr;
  for (const auto& h : hosts) {
    if (h.host != "localhost" && h.host.rfind("127.", 0) != 0 &&
        is_this_host(h.host, this_host_names)) {
      return h.host;
    }
  }
  return std::nullopt;
}

std::optional<std::string> this_host_address(const std::vector<HostSlots>& hosts,
                                             const std::vector<std::string>& this_host_names) {
  for (const auto& h : hosts) {
    unsigned char addr[sizeof(struct in6_addr)];
    const bool numeric = ::inet_pton(AF_INET, h.host.c_str(), addr) == 1 ||
                         ::inet_pton(AF_INET6, h.host.c_str(), addr) == 1;
    if (numeric && h.host.rfind("127.", 0) != 0 && h.host != "::1" &&
        is_this_host(h.host, this_host_names)) {
      return h.host;
    }
  }
  return std::nullopt;
}

std::string first_remote_host(const std::vector<HostSlots>& hosts,
                              const std::vector<std::string>& this_host_names) {
  for (const auto& h : hosts) {
    if (!is_this_host(h.host, this_host_names)) return h.host;
  }
  return "";
}

std::string host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace kolo::launcher
