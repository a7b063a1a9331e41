// Test helper: N ranks as threads, each with its own Runtime over one InprocWorld.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/runtime.h"
#include "startup/config.h"
#include "transport/inproc/inproc.h"

namespace kolo::core::testing {

// The unit tests' config: defaults, a 20 s peer timeout (a hang fails the test instead of
// blocking CI), and two variables of the process environment, parsed by the registry:
// KOLO_LOG_LEVEL=trace shows negotiation while debugging a test; KOLO_CYCLE_ON_DEMAND=0
// runs the tests with timer-driven cycles (the MPI transport's). A bad value of either
// fails the test that asked, naming it.
inline Config test_config() {
  const Env process = process_env();
  Env env;
  for (const char* name : {"KOLO_LOG_LEVEL", "KOLO_CYCLE_ON_DEMAND"}) {
    if (auto it = process.find(name); it != process.end()) env.insert(*it);
  }
  Config c;
  const Status s = parse_config(env, &c);
  if (!s.ok()) ADD_FAILURE() << "test_config: " << s.to_string();
  if (!env["KOLO_LOG_LEVEL"].empty()) log::set_level(c.log_level);
  c.peer_timeout_seconds = 20;
  return c;
}

// Runs fn(rank, runtime) on `n` threads. Exceptions escaping fn fail the test.
// `before_start(rank, runtime)`, when given, runs before the runtime starts (to give it a
// device factory, say).
inline void run_ranks(int n, const Config& config, const std::function<void(int, Runtime&)>& fn,
                      int local_size = 0, transport::InprocWorld* world_out = nullptr,
                      const std::function<void(int, Runtime&)>& before_start = nullptr) {
  transport::InprocWorld own(n, local_size);
  transport::InprocWorld& world = world_out ? *world_out : own;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Runtime rt(config, [&world, r](std::unique_ptr<transport::Communicator>* out) {
        *out = world.communicator(r);
        return Status::OK();
      });
      if (before_start) before_start(r, rt);
      Status s = rt.start();
      if (!s.ok()) {
        ADD_FAILURE() << "rank " << r << " failed to start: " << s.to_string();
        return;
      }
      try {
        fn(r, rt);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << " threw: " << e.what();
      }
      rt.shutdown();
    });
  }
  for (auto& t : threads) t.join();
}

inline TensorView view_of(void* data, DataType dtype, std::vector<std::int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape = std::move(shape);
  return v;
}

template <typename T>
TensorView view_of(std::vector<T>& v, DataType dtype, std::vector<std::int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(v.size())};
  return view_of(v.data(), dtype, std::move(shape));
}

}  // namespace kolo::core::testing
