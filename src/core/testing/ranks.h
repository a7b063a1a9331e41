// Test helper: N ranks as threads, each with its own Runtime over one InprocWorld.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/runtime.h"
#include "transport/inproc/inproc.h"

namespace kolo::core::testing {

inline Config test_config() {
  Config c;
  // KOLO_LOG_LEVEL=trace shows negotiation while debugging a test.
  if (const char* level = std::getenv("KOLO_LOG_LEVEL")) {
    log::Level l;
    if (log::parse_level(level, &l)) log::set_level(l);
  }
  c.peer_timeout_seconds = 20;  // a hang fails the test instead of blocking CI
  // KOLO_CYCLE_ON_DEMAND=0 runs the tests with timer-driven cycles (the MPI transport's).
  if (const char* on_demand = std::getenv("KOLO_CYCLE_ON_DEMAND")) {
    c.cycle_on_demand = std::string(on_demand) != "0";
  }
  return c;
}

// Runs fn(rank, runtime) on `n` threads. Exceptions escaping fn fail the test.
inline void run_ranks(int n, const Config& config, const std::function<void(int, Runtime&)>& fn,
                      int local_size = 0, transport::InprocWorld* world_out = nullptr) {
  transport::InprocWorld own(n, local_size);
  transport::InprocWorld& world = world_out ? *world_out : own;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Runtime rt(config, [&world, r](std::unique_ptr<transport::Communicator>* out) {
        *out = world.communicator(r);
        return Status::OK();
      });
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
