// Threads: the default number of intra-op threads per worker (see threads.h).
#include "launcher/threads.h"

#include <sched.h>

#include <cstdlib>
#include <iostream>
#include <vector>

#include "launcher/layout.h"
#include "startup/config.h"

namespace kolo::launcher {

std::optional<int> default_worker_threads(int cores, int local_size,
                                          const std::map<std::string, std::string>& env) {
  if (auto it = env.find(kThreadsVar); it != env.end() && !it->second.empty()) return {};
  if (cores < 1) cores = 1;
  if (local_size < 1) local_size = 1;
  return std::max(1, cores / local_size);
}

std::optional<std::string> worker_threads_value(int cores, int local_size,
                                                const std::map<std::string, std::string>& env) {
  if (auto it = env.find(kThreadsVar); it != env.end() && !it->second.empty()) return {};
  if (auto it = env.find(kJobThreadsVar); it != env.end() && !it->second.empty()) return it->second;
  return std::to_string(*default_worker_threads(cores, local_size, env));
}

std::string threads_notice(int cores, int local_size_here,
                           const std::map<std::string, std::string>& env) {
  const std::optional<int> threads = default_worker_threads(cores, local_size_here, env);
  if (!threads) return "";
  std::string line =
      "kolorun: OMP_NUM_THREADS is not set: each worker gets cores / workers on "
      "its host threads";
  if (local_size_here > 0) {
    line += " (" + std::to_string(*threads) + " here: " + std::to_string(cores) + " core" +
            (cores == 1 ? "" : "s") + ", " + std::to_string(local_size_here) + " worker" +
            (local_size_here == 1 ? "" : "s") + ")";
  }
  line += "; set OMP_NUM_THREADS to choose";
  return line;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return 1;
}

void prepare_worker_threads(const LaunchRequest& request,
                            const std::map<std::string, std::string>& env,
                            const std::vector<std::string>& this_host_names, bool announce) {
  if (auto it = env.find(kThreadsVar); it != env.end() && !it->second.empty()) {
    ::setenv(kJobThreadsVar, it->second.c_str(), 1);
    return;
  }
  ::unsetenv(kJobThreadsVar);  // a stale one from an outer job
  if (!announce) return;
  // Workers on this host: all of a one-host job, else those of the hosts that name it.
  const std::vector<int> per_host = fill_hosts(request.hosts, request.np);
  int here = 0;
  for (std::size_t i = 0; i < per_host.size(); ++i) {
    if (request.hosts.empty() || is_this_host(request.hosts[i].host, this_host_names))
      here += per_host[i];
  }
  const std::string line = threads_notice(usable_cores(), here, env);
  if (!line.empty()) std::cerr << line << std::endl;
}

void set_default_worker_threads(int local_size) {
  const std::optional<std::string> value =
      worker_threads_value(usable_cores(), local_size, core::process_env());
  if (value) ::setenv(kThreadsVar, value->c_str(), 1);
}

}  // namespace kolo::launcher
