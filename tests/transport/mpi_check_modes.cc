// kolo_mpi_check's --kill-test and --bench modes (see mpi_check.h).
//
// Not for: the correctness cases, which live in mpi_check.cc.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "collective_checks.h"
#include "mpi_check.h"

namespace kolo::transport::mpi_check {
namespace {

using std::chrono::duration;
using std::chrono::seconds;

}  // namespace

int run_kill_test(Communicator* comm, int victim, const std::string& op) {
  collective_check::KillExpect expect;  // MPI notices only at the deadline, and cannot
  expect.min_seconds = 1.9;             // name the rank that left an allreduce
  expect.max_seconds = 5.0;
  expect.names_in_allreduce = false;
  return collective_check::run_kill_test(comm, victim, op, expect);
}

namespace {

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

template <typename F>
void time_it(Communicator* comm, const char* what, int iterations, F f) {
  std::vector<double> us(iterations);
  for (int i = 0; i < iterations; ++i) {
    const auto t = Clock::now();
    if (!f(i)) {
      std::printf("[rank %d] %s failed\n", comm->rank(), what);
      return;
    }
    us[i] = duration<double, std::micro>(Clock::now() - t).count();
  }
  std::sort(us.begin(), us.end());
  std::printf("[rank %d] %-44s median %8.2f us  p90 %8.2f us  p99 %8.2f us  (%d iterations)\n",
              comm->rank(), what, us[iterations / 2], us[iterations * 9 / 10],
              us[iterations * 99 / 100], iterations);
  std::fflush(stdout);
}

}  // namespace

void run_bench(Communicator* comm) {
  const int n = 10000;
  std::vector<std::uint64_t> words(1);
  time_it(comm, "control_and (1 word)", n, [&](int i) {
    words[0] = ~std::uint64_t(i);
    return comm->control_and(words, soon()).ok();
  });
  std::vector<std::string> all;
  std::string mine(100, 'x'), response;
  time_it(comm, "control_gather+broadcast (100 B each)", n, [&](int) {
    if (!comm->control_gather(mine, &all, soon()).ok()) return false;
    if (comm->rank() == 0) response.assign(100 * comm->size(), 'y');
    return comm->control_broadcast(&response, soon()).ok();
  });
  float x = 1;
  time_it(comm, "allreduce (1 float32)", n, [&](int) {
    return comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, soon()).ok();
  });
  std::uint64_t w = 1;
  time_it(comm, "reference: blocking MPI_Allreduce (1 uint64)", n, [&](int) {
    return MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_UINT64_T, MPI_BAND, MPI_COMM_WORLD) ==
           MPI_SUCCESS;
  });
  std::vector<float> big(std::size_t{16} << 20, 1.0f);
  time_it(comm, "allreduce (64 MiB float32)", 10, [&](int) {
    return comm->allreduce(big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum, soon()).ok();
  });
  time_it(comm, "reference: blocking MPI_Allreduce (64 MiB)", 10, [&](int) {
    return MPI_Allreduce(MPI_IN_PLACE, big.data(), static_cast<int>(big.size()), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD) == MPI_SUCCESS;
  });
  // CPU the waiting thread burns while a peer is 1 s late.
  if (comm->rank() == 1) std::this_thread::sleep_for(seconds(1));
  const double cpu = thread_cpu_seconds();
  const auto t = Clock::now();
  if (!comm->control_and(words, soon()).ok()) std::printf("idle control_and failed\n");
  std::printf("[rank %d] waiting %.2f s for a late peer in control_and used %.1f ms of CPU\n",
              comm->rank(), duration<double>(Clock::now() - t).count(),
              (thread_cpu_seconds() - cpu) * 1e3);
  std::fflush(stdout);
}

}  // namespace kolo::transport::mpi_check
