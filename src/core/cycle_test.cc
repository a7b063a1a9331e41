// On-demand negotiation cycles (KOLO_CYCLE_ON_DEMAND, transports with a CycleBell): idle
// ranks do not cycle, a rank waiting for a late one sleeps (with a 100 ms heartbeat), and
// every rank runs the same cycles. Timer-driven cycling is the contrast.
#include <barrier>
#include <chrono>
#include <thread>

#include "core/ops.h"
#include "core/pacer.h"
#include "core/runtime.h"
#include "core/testing/ranks.h"

namespace kolo::core {
namespace {

using namespace std::chrono_literals;
using testing::run_ranks;
using testing::test_config;
using testing::view_of;

Config with_on_demand(bool on) {
  Config c = test_config();
  c.cycle_on_demand = on;
  return c;
}

// Sum-allreduce of {rank + 1} under `name`; returns the result.
float sum_of_ranks(Runtime& rt, int rank, const std::string& name) {
  std::vector<float> v = {static_cast<float>(rank + 1)};
  AllreduceOptions o;
  o.name = name;
  o.op = ReduceOp::kSum;
  ops::allreduce(rt, {view_of(v, DataType::kFloat32)}, {view_of(v, DataType::kFloat32)}, o, false)
      .wait();
  return v[0];
}

TEST(CycleTest, IdleRanksDoNotCycleOnDemandButDoOnATimer) {
  for (bool on_demand : {true, false}) {
    // No rank submits "after" before every rank has read its count: a rank's "after" asks
    // for a cycle that every rank runs, and ranks' 300 ms windows end up to a few hundred
    // microseconds apart, so it would land in a window still open.
    std::barrier counted(2);
    run_ranks(2, with_on_demand(on_demand), [on_demand, &counted](int rank, Runtime& rt) {
      EXPECT_EQ(rt.cycles_on_demand(), on_demand);
      EXPECT_EQ(sum_of_ranks(rt, rank, "warm"), 3.0f);
      // The handle completes inside the cycle; the count moves when the cycle ends.
      std::this_thread::sleep_for(50ms);
      const std::uint64_t before = rt.cycles();
      std::this_thread::sleep_for(300ms);
      const std::uint64_t idle_cycles = rt.cycles() - before;
      if (on_demand) {
        EXPECT_EQ(idle_cycles, 0u) << "rank " << rank;
      } else {
        // Backing off to one cycle per 8 ms: ~37 in 300 ms.
        EXPECT_GE(idle_cycles, 10u) << "rank " << rank;
      }
      counted.arrive_and_wait();
      EXPECT_EQ(sum_of_ranks(rt, rank, "after"), 3.0f);
    });
  }
}

TEST(CycleTest, RankWaitingForALateRankSleepsWithAHeartbeat) {
  run_ranks(2, with_on_demand(true), [](int rank, Runtime& rt) {
    EXPECT_EQ(sum_of_ranks(rt, rank, "warm"), 3.0f);
    const std::uint64_t before = rt.cycles();
    if (rank == 1) std::this_thread::sleep_for(500ms);
    EXPECT_EQ(sum_of_ranks(rt, rank, "late"), 3.0f);
    // Rank 0's request, ~5 heartbeats (one per 100 ms), rank 1's request: not one cycle per
    // millisecond as with timer-driven cycling.
    const std::uint64_t cycles = rt.cycles() - before;
    EXPECT_GE(cycles, 1u);
    EXPECT_LE(cycles, 12u) << "rank " << rank;
  });
}

TEST(CycleTest, EveryRankRunsTheSameCycles) {
  for (int n : {2, 3, 4}) {
    std::vector<std::uint64_t> cycles(n);
    run_ranks(n, with_on_demand(true), [&cycles, n](int rank, Runtime& rt) {
      // Staggered submissions of several tensors, some ranks sleeping in between, so that
      // ranks ask for cycles at different times (and sometimes at the same time).
      for (int step = 0; step < 20; ++step) {
        if ((step + rank) % 3 == 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(rank * 2));
        const float got = sum_of_ranks(rt, rank, "step." + std::to_string(step % 4));
        EXPECT_EQ(got, static_cast<float>(n * (n + 1) / 2));
      }
      EXPECT_EQ(sum_of_ranks(rt, rank, "last"), static_cast<float>(n * (n + 1) / 2));
      std::this_thread::sleep_for(100ms);
      // The shutdown is negotiated too: every rank leaves in the same cycle, so the final
      // counts agree if and only if every rank ran every cycle.
      rt.shutdown();
      cycles[rank] = rt.cycles();
    });
    for (int r = 1; r < n; ++r) EXPECT_EQ(cycles[r], cycles[0]) << n << " ranks, rank " << r;
  }
}

// Caller-run cycles (runtime.h): over a transport that may be called from any thread and
// has a bell (inproc), a rank that submits and waits runs most cycles on its own thread;
// without a bell (timer-driven) the background thread runs them all. Results are the same.
TEST(CycleTest, AWaitingCallerRunsTheCyclesItself) {
  for (bool on_demand : {true, false}) {
    run_ranks(2, with_on_demand(on_demand), [on_demand](int rank, Runtime& rt) {
      for (int i = 0; i < 300; ++i) EXPECT_EQ(sum_of_ranks(rt, rank, "lockstep"), 3.0f);
      if (on_demand) {
        EXPECT_GT(rt.caller_cycles(), 0u) << "rank " << rank;
        EXPECT_LE(rt.caller_cycles(), rt.cycles()) << "rank " << rank;
      } else {
        EXPECT_EQ(rt.caller_cycles(), 0u) << "rank " << rank;
      }
    });
  }
}

// Who finds the gate held waits for it by the last cycle's length (pacer.h): lightly, or
// by looking again, only while cycles are short; a 4 MiB allreduce's cycle (~500 us) made
// the background thread wake twice per cycle and the waiter yield for 30 us, ~20% more
// context switches than before the light naps.
TEST(CycleTest, ThreadsThatFindTheGateHeldWaitByTheLastCyclesLength) {
  using std::chrono::microseconds;
  EXPECT_TRUE(relock_lightly(microseconds(50), microseconds(3)));     // a latency loop
  EXPECT_FALSE(relock_lightly(microseconds(50), microseconds(500)));  // 4 MiB allreduces
  EXPECT_FALSE(relock_lightly(microseconds(5000), microseconds(3)));  // no recent cycle
  EXPECT_GT(helper_look(microseconds(3)), microseconds(0));
  EXPECT_EQ(helper_look(microseconds(500)), microseconds(0));
}

}  // namespace
}  // namespace kolo::core
