// Threads: how many intra-op threads each worker gets when the user has not said.
//
// libtorch (OpenMP) starts one thread per core in every process, so N workers on a host
// run N times as many threads as it has cores, and they get in each other's way
// (measured: 2 workers on 2 cores, 352 images/s with default threads, 561 with one each).
// When OMP_NUM_THREADS is unset (or empty), each worker's shim sets it to
// max(1, cores / workers on its host), counting the cores the shim may run on, and
// kolorun prints one line saying so. A value the user set is left alone; one set in
// kolorun's environment reaches the shims on other hosts as KOLO_OMP_NUM_THREADS (KOLO_*
// variables travel with the job), where it is used unless that host sets its own. Not for:
// pinning workers to cores (kolorun does not bind; see mpirun_command.cc).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/mpirun_command.h"

namespace kolo::launcher {

inline constexpr const char* kThreadsVar = "OMP_NUM_THREADS";
inline constexpr const char* kJobThreadsVar = "KOLO_OMP_NUM_THREADS";  // kolorun's value

// Threads for one worker on a host with `cores` usable cores and `local_size` workers,
// or nullopt when `env` already sets OMP_NUM_THREADS to something non-empty.
std::optional<int> default_worker_threads(int cores, int local_size,
                                          const std::map<std::string, std::string>& env);

// What the shim sets OMP_NUM_THREADS to in a worker's environment `env`: nothing when it
// is set there; else kolorun's value (KOLO_OMP_NUM_THREADS) if the user gave one; else
// default_worker_threads.
std::optional<std::string> worker_threads_value(int cores, int local_size,
                                                const std::map<std::string, std::string>& env);

// kolorun's one line about it (without a newline), or "" when the user set
// OMP_NUM_THREADS. `local_size_here` is the number of workers on this host (0: none,
// e.g. all on other hosts), `cores` this host's.
std::string threads_notice(int cores, int local_size_here,
                           const std::map<std::string, std::string>& env);

// The cores this process may run on (its CPU affinity), at least 1.
int usable_cores();

// For kolorun, before it builds the mpirun command: passes a user's OMP_NUM_THREADS on
// as KOLO_OMP_NUM_THREADS (so that it reaches other hosts) and, with `announce`, prints
// threads_notice for `request` to stderr (nothing if it is empty).
void prepare_worker_threads(const LaunchRequest& request,
                            const std::map<std::string, std::string>& env,
                            const std::vector<std::string>& this_host_names, bool announce);

// For the shim: sets OMP_NUM_THREADS in this process's environment (which the program
// inherits) when default_worker_threads says so.
void set_default_worker_threads(int local_size);

}  // namespace kolo::launcher
