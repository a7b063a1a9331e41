// FutexCycleBell (cycle_bell.h): requests are a running maximum shared by all ranks, wake
// the other ranks, and wake_local() wakes only this rank; a stale ticket never sleeps.
#include "transport/cycle_bell.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace kolo::transport {
namespace {

using namespace std::chrono_literals;

struct alignas(128) Line {
  std::uint64_t requested = 0;
  std::uint32_t ring = 0;
};

struct Words {
  Line lines[3];
  std::vector<std::uint32_t*> rings() { return {&lines[0].ring, &lines[1].ring, &lines[2].ring}; }
  FutexCycleBell bell(int rank, bool lazy = false) {
    return FutexCycleBell(&lines[0].requested, rings(), rank, lazy);
  }
};

TEST(CycleBellTest, RequestsAreAMaximumSharedByEveryRank) {
  Words w;
  FutexCycleBell a = w.bell(0), b = w.bell(1);
  EXPECT_EQ(a.requested(), 0u);
  a.request(1);
  EXPECT_EQ(b.requested(), 1u);
  b.request(1);  // asked for already: no change
  EXPECT_EQ(a.requested(), 1u);
  b.request(3);
  a.request(2);  // lower than what is there: ignored
  EXPECT_EQ(a.requested(), 3u);
}

TEST(CycleBellTest, RequestWakesTheOtherRanksButNotTheRequester) {
  Words w;
  FutexCycleBell a = w.bell(0), b = w.bell(1), c = w.bell(2);
  const std::uint32_t ta = a.ticket(), tb = b.ticket(), tc = c.ticket();
  a.request(1);
  EXPECT_EQ(a.ticket(), ta);
  EXPECT_NE(b.ticket(), tb);
  EXPECT_NE(c.ticket(), tc);
  // A stale ticket returns at once instead of sleeping for the minute.
  const auto start = std::chrono::steady_clock::now();
  b.wait(tb, start + 60s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(CycleBellTest, WakeLocalWakesOnlyThisRank) {
  Words w;
  FutexCycleBell a = w.bell(0), b = w.bell(1);
  const std::uint32_t ta = a.ticket(), tb = b.ticket();
  a.wake_local();
  EXPECT_NE(a.ticket(), ta);
  EXPECT_EQ(b.ticket(), tb);
}

TEST(CycleBellTest, SleeperWakesOnRequestAndOnTimeout) {
  Words w;
  FutexCycleBell a = w.bell(0), b = w.bell(1);
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    const std::uint32_t t = b.ticket();
    while (b.requested() < 1) b.wait(t, std::chrono::steady_clock::now() + 60s);
    woke = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(woke.load());
  const auto asked = std::chrono::steady_clock::now();
  a.request(1);
  sleeper.join();
  EXPECT_TRUE(woke.load());
  // A lost wake-up would leave the sleeper in its minute-long wait.
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 10s);

  // Nothing happens: wait() returns at `until`.
  const auto start = std::chrono::steady_clock::now();
  b.wait(b.ticket(), start + 30ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 25ms);
}

// Rings skip the system call while the rank is awake (bit 0 of its word): thousands of
// hand-offs between a sleeper and a ringer, each looking at its flag first, lose none
// (a lost one would leave the sleeper in its wait until the 5 s timeout).
TEST(CycleBellTest, ManyHandOffsLoseNoWakeUp) {
  Words w;
  FutexCycleBell sleeper_bell = w.bell(0), ringer_bell = w.bell(1);
  std::atomic<int> posted{0}, acked{0};
  int timeouts = 0;
  constexpr int kRounds = 5000;
  std::thread sleeper([&] {
    for (int round = 1; round <= kRounds; ++round) {
      for (;;) {
        const std::uint32_t t = sleeper_bell.ticket();
        if (posted.load() >= round) break;
        const auto until = std::chrono::steady_clock::now() + 5s;
        sleeper_bell.wait(t, until);
        if (std::chrono::steady_clock::now() >= until) ++timeouts;
      }
      acked.store(round);
    }
  });
  for (int round = 1; round <= kRounds; ++round) {
    posted.store(round);
    ringer_bell.request(static_cast<std::uint64_t>(round));  // rings rank 0
    while (acked.load() < round) std::this_thread::yield();  // one hand-off per round
  }
  sleeper.join();
  EXPECT_EQ(timeouts, 0);
}

// How long rank b's sleeper (until 400 ms from now, lightly or not) stays in wait() when
// poke() runs 30 ms into it.
template <typename Poke>
std::chrono::steady_clock::duration slept(FutexCycleBell& b, bool light, Poke&& poke) {
  std::atomic<bool> asleep{false};
  std::chrono::steady_clock::duration took{};
  std::thread sleeper([&] {
    const std::uint32_t t = b.ticket();
    asleep = true;
    const auto start = std::chrono::steady_clock::now();
    b.wait(t, start + 400ms, light);
    took = std::chrono::steady_clock::now() - start;
  });
  while (!asleep.load()) std::this_thread::yield();
  std::this_thread::sleep_for(30ms);  // in FUTEX_WAIT by now
  poke();
  sleeper.join();
  return took;
}

// A light sleep lets local news wait (wake_local() wakes no one; the sleeper looks again
// at its short `until`), but news that is due now (wake_local(true)) and a peer's request
// still wake it. With a helper awake (a caller of this rank watching requested() itself),
// neither wakes the sleeper; after the helper clears it, wake_local() wakes a deep sleeper
// at once.
TEST(CycleBellTest, LightSleepsAndAwakeHelpersSkipTheWakeUp) {
  Words w;
  FutexCycleBell a = w.bell(0), b = w.bell(1);
  EXPECT_GE(slept(b, true, [&] { b.wake_local(); }), 350ms);      // local news waits
  EXPECT_LT(slept(b, true, [&] { b.wake_local(true); }), 300ms);  // unless it is due now
  EXPECT_LT(slept(b, true, [&] { a.request(1); }), 300ms);        // a peer's request wakes
  EXPECT_LT(slept(b, false, [&] { b.wake_local(); }), 300ms);
  b.set_helper_awake(true);
  EXPECT_GE(slept(b, false, [&] { a.request(2); }), 350ms);
  EXPECT_GE(slept(b, false, [&] { b.wake_local(); }), 350ms);
  b.set_helper_awake(false);
  EXPECT_LT(slept(b, false, [&] { b.wake_local(); }), 300ms);
}

// Lazy bells (shm): a peer's request leaves a light sleep to end on its own too, and
// wakes a deep one; nudge() wakes a sleeper of either kind, unless a helper of its rank
// is awake (that one watches requested() itself).
TEST(CycleBellTest, LazyBellsLeaveLightSleepsToANudge) {
  Words w;
  FutexCycleBell a = w.bell(0, /*lazy=*/true), b = w.bell(1, /*lazy=*/true);
  EXPECT_GE(slept(b, true, [&] { a.request(1); }), 350ms);
  EXPECT_LT(slept(b, false, [&] { a.request(2); }), 300ms);
  EXPECT_LT(slept(b, true, [&] { a.nudge(1); }), 300ms);
  EXPECT_LT(slept(b, false, [&] { a.nudge(1); }), 300ms);
  EXPECT_LT(slept(b, true,
                  [&] {
                    a.request(3);
                    a.nudge(1);
                  }),
            300ms);
  b.set_helper_awake(true);
  EXPECT_GE(slept(b, true, [&] { a.nudge(1); }), 350ms);
  b.set_helper_awake(false);
  a.nudge(1);  // nobody sleeps: nothing happens
  a.nudge(7);  // not a rank: ignored
}

}  // namespace
}  // namespace kolo::transport
