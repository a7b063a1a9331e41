// kolo_shm_check's --kill-rank and --bench modes (see shm_check.h).
//
// Not for: the correctness cases (shm_check.cc).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "check_harness.h"
#include "shm_check.h"
#include "transport/shm/shm_internal.h"

namespace kolo::transport::shm_check {

using std::chrono::duration;

int run_kill_test(Communicator* comm, int victim) {
  const int me = comm->rank();
  if (!comm->barrier(soon()).ok()) {
    std::printf("FAIL [rank %d] shm kill-test setup\n", me);
    return 1;
  }
  // 16 MiB per call: with 1 MiB regions each allreduce is 32 barriers, so the kill lands
  // in the middle of one (between or inside its chunks).
  std::vector<float> data(std::size_t{4} << 20, 1.0f);
  if (me == victim) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::printf("shm kill-test: rank killing itself (pid %d)\n", static_cast<int>(getpid()));
      std::fflush(stdout);
      kill(getpid(), SIGKILL);
    }).detach();
  }
  const auto start = Clock::now();
  Status s;
  int calls = 0;
  while (s.ok() && Clock::now() - start < std::chrono::seconds(20)) {
    s = comm->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum, soon());
    ++calls;
  }
  const double elapsed = duration<double>(Clock::now() - start).count();
  const auto again_start = Clock::now();
  std::vector<std::uint64_t> words = {1};
  const Status again = comm->control_and(words, soon());
  const double again_elapsed = duration<double>(Clock::now() - again_start).count();

  std::string problem;
  if (s.code() != ErrorCode::kPeerFailure)
    problem = "expected a peer failure";
  else if (!check::names_dead_rank(s.message(), victim))
    problem = "the message does not name rank " + std::to_string(victim) + " as the one gone";
  else if (elapsed > 5.0)
    problem = "took " + std::to_string(elapsed) + " s (the kill came after 0.2 s)";
  else if (again.code() != ErrorCode::kPeerFailure || again_elapsed > 0.01)
    problem = "the next call did not fail at once";
  std::printf(
      "%s [rank %d] shm kill-test (rank %d killed) after %.2f s and %d allreduces: %s%s%s\n",
      problem.empty() ? "PASS" : "FAIL", me, victim, elapsed, calls, s.to_string().c_str(),
      problem.empty() ? "" : " -- ", problem.c_str());
  std::fflush(stdout);
  // No shutdown: a rank is dead (an MPI base leaks MPI on purpose; nothing waits for it).
  std::_Exit(problem.empty() ? 0 : 1);
}

namespace {

template <typename F>
void time_it(Communicator* comm, const char* what, std::size_t bytes, int iterations, F f) {
  std::vector<double> s;
  for (int i = 0; i < iterations + 2; ++i) {
    if (!comm->barrier(soon()).ok()) {
      std::printf("[rank %d] %s: barrier failed\n", comm->rank(), what);
      return;
    }
    const auto t = Clock::now();
    if (!f()) {
      std::printf("[rank %d] %s failed\n", comm->rank(), what);
      return;
    }
    if (i >= 2) s.push_back(duration<double>(Clock::now() - t).count());  // 2 warm-ups
  }
  std::sort(s.begin(), s.end());
  const double median = s[s.size() / 2];
  if (comm->rank() == 0) {
    std::printf("%-46s median %9.1f us  best %9.1f us  algbw %6.2f GB/s  (%d ranks, %d runs)\n",
                what, median * 1e6, s[0] * 1e6, static_cast<double>(bytes) / median / 1e9,
                comm->size(), iterations);
  }
  std::fflush(stdout);
}

}  // namespace

void run_bench(Communicator* comm) {
  auto* shm = dynamic_cast<shm::ShmCommunicator*>(comm);
  const std::size_t count = std::size_t{16} << 20, bytes = count * sizeof(float);
  const int iterations = 20;
  std::vector<float> data(count, 1.0f);
  if (void* region = comm->fusion_buffer(bytes)) {
    std::fill_n(static_cast<float*>(region), count, 1.0f);
    time_it(comm, "shm allreduce 64 MiB f32, zero-copy", bytes, iterations, [&] {
      return comm->allreduce(region, count, DataType::kFloat32, ReduceOp::kSum, soon()).ok();
    });
  } else if (comm->rank() == 0) {
    std::printf("no zero-copy run: regions are smaller than 64 MiB\n");
  }
  time_it(comm, "shm allreduce 64 MiB f32, copy path", bytes, iterations, [&] {
    return comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum, soon()).ok();
  });
  if (shm) {
    const std::string what = std::string(shm->base()->name()) + " transport allreduce 64 MiB f32";
    time_it(comm, what.c_str(), bytes, iterations, [&] {
      return shm->base()
          ->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum, soon())
          .ok();
    });
  }
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    const std::size_t n16 = bytes / 2;
    if (void* region = comm->fusion_buffer(bytes)) {
      std::fill_n(static_cast<std::uint16_t*>(region), n16, std::uint16_t{0x3c00});
      const std::string what =
          std::string("shm allreduce 64 MiB ") + dtype_name(dt) + ", zero-copy";
      time_it(comm, what.c_str(), bytes, iterations,
              [&] { return comm->allreduce(region, n16, dt, ReduceOp::kSum, soon()).ok(); });
    }
  }
  float x = 1;
  time_it(comm, "shm allreduce 1 f32 (latency)", 4, 2000,
          [&] { return comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, soon()).ok(); });
  std::vector<std::uint64_t> w(16, ~std::uint64_t{0});
  time_it(comm, "shm control_and 16 words (latency)", 128, 2000,
          [&] { return comm->control_and(w, soon()).ok(); });
}

}  // namespace kolo::transport::shm_check
