// What an idle kolo runtime costs: kolo::init(), then nothing for --seconds, then each
// rank prints the CPU time its threads other than main used meanwhile (the background
// thread; under MPI also OpenMPI's), from /proc/self/task/*/schedstat. For
// docs/history/benchmarks.md; run with kolorun -np N (or alone for the local transport).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "kolo/kolo.h"

namespace {

// tid -> {ns on a CPU, times scheduled} for every thread of this process but the main one.
std::map<long, std::pair<double, long>> other_threads() {
  std::map<long, std::pair<double, long>> out;
  const long self = ::getpid();
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    const long tid = std::stol(e.path().filename().string());
    if (tid == self) continue;
    std::ifstream f(e.path() / "schedstat");
    double run_ns = 0, wait_ns = 0;
    long slices = 0;
    if (f >> run_ns >> wait_ns >> slices) out[tid] = {run_ns, slices};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  if (argc == 3 && std::string(argv[1]) == "--seconds") seconds = std::stod(argv[2]);
  kolo::init();
  kolo::barrier();
  const auto before = other_threads();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const auto after = other_threads();
  double cpu_ns = 0;
  long slices = 0;
  for (const auto& [tid, v] : after) {
    auto it = before.find(tid);
    cpu_ns += v.first - (it == before.end() ? 0 : it->second.first);
    slices += v.second - (it == before.end() ? 0 : it->second.second);
  }
  std::printf(
      "rank %d of %d: idle %.1f s: background threads used %.3f s of CPU (%.2f%% of a core), "
      "scheduled %ld times (%.0f/s)\n",
      kolo::rank(), kolo::size(), seconds, cpu_ns / 1e9, 100 * cpu_ns / 1e9 / seconds, slices,
      slices / seconds);
  std::fflush(stdout);
  kolo::barrier();
  kolo::shutdown();
  return 0;
}
