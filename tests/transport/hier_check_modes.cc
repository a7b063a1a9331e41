// kolo_hier_check's --kill-rank and --bench modes (see hier_check.h).
//
// Not for: the correctness cases (hier_check.cc).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "hier_check.h"
#include "transport/hier/hier_internal.h"

namespace kolo::transport::hier_check {

using std::chrono::duration;

int run_kill_test(hier::HierarchicalCommunicator* comm, int victim) {
  const Topology t = comm->topology();
  const int me = t.rank;
  if (!comm->barrier(soon()).ok()) {
    std::printf("FAIL [rank %d] hier kill-test setup\n", me);
    return 1;
  }
  // 16 MiB per call: with 1 MiB regions each allreduce is 32 chunks (64 shm barriers and
  // 32 cross-host allreduces), so the kill lands in the middle of one.
  std::vector<float> data(std::size_t{4} << 20, 1.0f);
  if (me == victim) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::printf("hier kill-test: rank killing itself (pid %d)\n", static_cast<int>(getpid()));
      std::fflush(stdout);
      kill(getpid(), SIGKILL);
    }).detach();
  }
  constexpr double kDeadline = 3.0;
  const auto start = Clock::now();
  Status s;
  int calls = 0;
  while (s.ok() && Clock::now() - start < std::chrono::seconds(20)) {
    const Deadline deadline = Clock::now() + std::chrono::seconds(3);
    s = comm->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum, deadline);
    ++calls;
  }
  const double elapsed = duration<double>(Clock::now() - start).count();
  const auto again_start = Clock::now();
  const Status again =
      comm->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum, soon());
  const double again_elapsed = duration<double>(Clock::now() - again_start).count();

  // The victim's host-mates see it die in shared memory; the other hosts hear of it
  // through the failure notices. Everyone must fail well before the deadline, naming it.
  std::string problem;
  if (s.code() != ErrorCode::kPeerFailure)
    problem = "expected a peer failure";
  else if (!check::names_dead_rank(s.message(), victim))
    problem = "the message does not name rank " + std::to_string(victim) + " as the one gone";
  else if (elapsed > kDeadline - 1.0)
    problem = "took " + std::to_string(elapsed) + " s (the kill came after 0.3 s)";
  else if (again.code() != ErrorCode::kPeerFailure || again_elapsed > 0.01)
    problem = "the next call did not fail at once";
  std::printf(
      "%s [rank %d] hier kill-test (rank %d killed) after %.2f s and %d allreduces: %s%s%s\n",
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
    std::printf("%-52s median %9.1f us  best %9.1f us  algbw %6.2f GB/s  (%d ranks, %d runs)\n",
                what, median * 1e6, s[0] * 1e6, static_cast<double>(bytes) / median / 1e9,
                comm->size(), iterations);
  }
  std::fflush(stdout);
}

}  // namespace

void run_bench(hier::HierarchicalCommunicator* comm) {
  const std::size_t count = std::size_t{16} << 20, bytes = count * sizeof(float);
  const int iterations = 20;
  const Topology& t = comm->topology();
  if (comm->rank() == 0) {
    std::printf("%d ranks: %d hosts x %d local ranks\n", t.size, t.cross_size, t.local_size);
  }
  std::vector<float> data(count, 1.0f);
  if (void* region = comm->fusion_buffer(bytes)) {
    std::fill_n(static_cast<float*>(region), count, 1.0f);
    time_it(comm, "hierarchical allreduce 64 MiB f32, zero-copy", bytes, iterations, [&] {
      return comm->allreduce(region, count, DataType::kFloat32, ReduceOp::kSum, soon()).ok();
    });
  } else if (comm->rank() == 0) {
    std::printf("no zero-copy run: regions are smaller than 64 MiB\n");
  }
  time_it(comm, "hierarchical allreduce 64 MiB f32, copy path", bytes, iterations, [&] {
    return comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum, soon()).ok();
  });
  // The two parts alone: the shm phases of one host (no cross step), and the cross step of
  // every local rank at once (1/L of the buffer each).
  if (void* region = comm->fusion_buffer(bytes)) {
    time_it(comm, "  part: shm allreduce 64 MiB f32 in each host", bytes, iterations, [&] {
      return comm->local()
          ->allreduce(region, count, DataType::kFloat32, ReduceOp::kSum, soon())
          .ok();
    });
  }
  const std::size_t slice = count / static_cast<std::size_t>(t.local_size);
  time_it(comm, "  part: cross-host allreduce of 64 MiB / L f32", bytes, iterations, [&] {
    return comm->cross()
        ->allreduce(data.data(), slice, DataType::kFloat32, ReduceOp::kSum, soon())
        .ok();
  });
  const std::string base =
      std::string("kolo ") + comm->global()->name() + " transport allreduce 64 MiB f32 (flat)";
  time_it(comm, base.c_str(), bytes, iterations, [&] {
    return comm->global()
        ->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum, soon())
        .ok();
  });
  float x = 1;
  time_it(comm, "hierarchical allreduce 1 f32 (latency)", 4, 1000,
          [&] { return comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, soon()).ok(); });
}

}  // namespace kolo::transport::hier_check
