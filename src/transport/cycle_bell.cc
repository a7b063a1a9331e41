#include "transport/cycle_bell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <ctime>

namespace kolo::transport {
namespace {

template <typename T>
std::atomic_ref<T> at(T* word) {
  return std::atomic_ref<T>(*word);
}

}  // namespace

FutexCycleBell::FutexCycleBell(std::uint64_t* requested, std::vector<std::uint32_t*> rings,
                               int rank, bool lazy)
    : requested_(requested), rings_(std::move(rings)), rank_(rank), lazy_(lazy) {}

// A ring word counts in steps of 8; its low bits are flags: kSleeping (its rank's sleeper
// is in wait(), or about to be), kLight (that sleep is short: local news may wait for it)
// and kHelperAwake (set_helper_awake). A ring adds 8 and calls FUTEX_WAKE only when the
// flags it saw say a sleeper needs it. wait() sets its flags, sleeps only if the count is
// still the ticket's, and clears them. All are read-modify-writes of one word, so either
// the ringer sees the flag or the sleeper sees the new count: no wake-up is lost, and a
// ring costs no system call while its rank is awake.
constexpr std::uint32_t kSleeping = 1, kLight = 2, kHelperAwake = 4, kFlags = 7, kStep = 8;

void FutexCycleBell::ring(int r, std::uint32_t quiet) {
  const std::uint32_t before = at(rings_[r]).fetch_add(kStep, std::memory_order_seq_cst);
  // Not FUTEX_PRIVATE: the word may be shared between processes.
  if ((before & kSleeping) && !(before & quiet)) {
    syscall(SYS_futex, rings_[r], FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

void FutexCycleBell::wake_local(bool even_light) {
  ring(rank_, even_light ? kHelperAwake : kHelperAwake | kLight);
}

std::uint32_t FutexCycleBell::ticket() const {
  return at(rings_[rank_]).load(std::memory_order_seq_cst) & ~kFlags;
}

void FutexCycleBell::set_helper_awake(bool awake) {
  if (awake) {
    at(rings_[rank_]).fetch_or(kHelperAwake, std::memory_order_seq_cst);
  } else {
    at(rings_[rank_]).fetch_and(~kHelperAwake, std::memory_order_seq_cst);
  }
}

void FutexCycleBell::request(std::uint64_t cycle) {
  std::uint64_t seen = at(requested_).load(std::memory_order_seq_cst);
  while (seen < cycle &&
         !at(requested_).compare_exchange_weak(seen, cycle, std::memory_order_seq_cst)) {
  }
  if (seen >= cycle) return;  // someone asked for it first and woke everyone
  // Lazy: a light sleeper looks within its nap (at most ~100 us) on its own, or sooner
  // when nudged.
  const std::uint32_t quiet = lazy_ ? kHelperAwake | kLight : kHelperAwake;
  for (int r = 0; r < static_cast<int>(rings_.size()); ++r) {
    if (r != rank_) ring(r, quiet);
  }
}

void FutexCycleBell::nudge(int r) {
  if (r < 0 || r >= static_cast<int>(rings_.size())) return;
  const std::uint32_t seen = at(rings_[r]).load(std::memory_order_seq_cst);
  // No count step: the request already made one, so a sleeper that has not gone to sleep
  // yet returns at once, and one that has wakes now.
  if ((seen & kSleeping) && !(seen & kHelperAwake)) {
    syscall(SYS_futex, rings_[r], FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

std::uint64_t FutexCycleBell::requested() const {
  return at(requested_).load(std::memory_order_seq_cst);
}

void FutexCycleBell::wait(std::uint32_t ticket, Clock::time_point until, bool light) {
  const auto left = until - Clock::now();
  if (left <= Clock::duration::zero()) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  std::uint32_t* word = rings_[rank_];
  const std::uint32_t flags = light ? kSleeping | kLight : kSleeping;
  const std::uint32_t seen = at(word).fetch_or(flags, std::memory_order_seq_cst) | flags;
  if ((seen & ~kFlags) == ticket) {
    // Returns at once (EAGAIN) when the word changed meanwhile; ETIMEDOUT and EINTR just
    // mean "look again".
    syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  at(word).fetch_and(~(kSleeping | kLight), std::memory_order_seq_cst);
}

}  // namespace kolo::transport
