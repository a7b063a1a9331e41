// A worker of an elastic job that uses kolo's core API only (kolo.h): each step allreduces
// (rank + 1) and checks the sum against the generation's size, printing one line per step:
//   "gen G rank R size S step K ok 1 pid P t_ms T"
// A lost worker (kolo::WorkersChanged) resets to the next generation and goes on; every
// `check` steps it asks whether kolorun has a newer membership (hosts_updated) and resets
// to it. Usage: kolo_elastic_core_worker STEPS SLEEP_MS CHECK_EVERY. Exits 0 when it ran
// STEPS steps ("done"; the step count is rank 0's after each reset) or kolorun removed it
// ("removed"), 3 on a wrong sum.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kolo/kolo.h"

namespace {

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Joins the next generation, however many tries that takes; false: removed.
bool reset() {
  for (;;) {
    try {
      return kolo::elastic::reset();
    } catch (const kolo::WorkersChanged& e) {
      std::printf("reset failed, again: %s\n", e.what());
    }
  }
}

// Every member takes rank 0's step count (rank 0 is the oldest member: kolorun orders
// survivors first), as State::sync does for a whole training state.
void sync(int* step) {
  double v = *step;
  kolo::BroadcastOptions options;
  options.name = "sync.step";
  kolo::broadcast(kolo::TensorView{&v, kolo::DataType::kFloat64, {}}, options);
  *step = static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s STEPS SLEEP_MS CHECK_EVERY\n", argv[0]);
    return 2;
  }
  const int steps = std::atoi(argv[1]);
  const int sleep_ms = std::atoi(argv[2]);
  const int check = std::atoi(argv[3]);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    kolo::init();
  } catch (const kolo::WorkersChanged& e) {
    std::printf("first generation failed: %s\n", e.what());
    if (!reset()) return std::printf("removed\n"), 0;
  }
  int step = 0;
  bool synced = false;
  while (step < steps) {
    try {
      if (!synced) sync(&step), synced = true;
      double v = kolo::rank() + 1;
      kolo::AllreduceOptions options;
      options.name = "step";
      options.op = kolo::ReduceOp::kSum;
      kolo::allreduce(kolo::TensorView{&v, kolo::DataType::kFloat64, {}}, options);
      const int n = kolo::size();
      const bool ok = v == n * (n + 1) / 2.0;
      std::printf("gen %d rank %d size %d step %d ok %d pid %d t_ms %lld\n",
                  kolo::elastic::generation(), kolo::rank(), n, step, ok ? 1 : 0,
                  static_cast<int>(getpid()), now_ms());
      if (!ok) return 3;
      ++step;
      if (check > 0 && step % check == 0 && kolo::elastic::hosts_updated()) {
        std::printf("hosts updated at step %d\n", step);
        if (!reset()) return std::printf("removed\n"), 0;
        synced = false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    } catch (const kolo::WorkersChanged& e) {
      std::printf("workers changed at step %d t_ms %lld: %s\n", step, now_ms(), e.what());
      if (!reset()) return std::printf("removed\n"), 0;
      synced = false;
    }
  }
  kolo::shutdown();
  std::printf("done pid %d\n", static_cast<int>(getpid()));
  return 0;
}
