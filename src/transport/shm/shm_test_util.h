// Test helpers for the shm transport's unit tests (shm_test.cc, shm_allreduce_test.cc): ranks
// as threads of one process, each wrapping its inproc communicator in shm and mapping the
// segment itself; deadlines a number of seconds away; this process's /dev/shm/kolo-* files.
//
// Not for: real processes (kolo_shm_check, tests/transport/shm_check.cc).
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "transport/inproc/inproc.h"
#include "transport/shm/shm_communicator.h"

namespace kolo::transport::testing {

inline Deadline in(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// This process's segments ("kolo-<pid>-..."): ctest runs other test processes, whose
// segments exist for a moment during their bootstrap, at the same time.
inline std::set<std::string> kolo_segments() {
  std::set<std::string> out;
  const std::string mine = "kolo-" + std::to_string(::getpid()) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).rfind(mine, 0) == 0) out.insert(e->d_name);
    }
    closedir(d);
  }
  return out;
}

// Runs fn on `n` ranks as threads, each with its communicator wrapped in shm.
inline void on_shm_ranks(int n, const ShmOptions& options,
                         const std::function<void(int, std::unique_ptr<Communicator>&)>& fn) {
  InprocWorld world(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = world.communicator(r);
      const Status s = wrap_in_shm(comm, options);
      ASSERT_TRUE(s.ok()) << s.to_string();
      ASSERT_STREQ(comm->name(), "shm");
      fn(r, comm);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace kolo::transport::testing
