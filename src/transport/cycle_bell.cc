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
                               int rank)
    : requested_(requested), rings_(std::move(rings)), rank_(rank) {}

// A ring word counts in steps of 2; bit 0 says its rank sleeps (or is about to) in wait().
// ring() adds 2 and calls FUTEX_WAKE only when that bit was set; wait() sets it, sleeps
// only if the count is still the ticket's, and clears it. Both are read-modify-writes of
// one word, so either the ringer sees the bit or the sleeper sees the new count: no
// wake-up is lost, and a ring costs no system call while its rank is awake.
constexpr std::uint32_t kSleeping = 1;

void FutexCycleBell::ring(int r) {
  const std::uint32_t before = at(rings_[r]).fetch_add(2, std::memory_order_seq_cst);
  // Not FUTEX_PRIVATE: the word may be shared between processes.
  if (before & kSleeping) syscall(SYS_futex, rings_[r], FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void FutexCycleBell::wake_local() { ring(rank_); }

std::uint32_t FutexCycleBell::ticket() const {
  return at(rings_[rank_]).load(std::memory_order_seq_cst) & ~kSleeping;
}

void FutexCycleBell::request(std::uint64_t cycle) {
  std::uint64_t seen = at(requested_).load(std::memory_order_seq_cst);
  while (seen < cycle &&
         !at(requested_).compare_exchange_weak(seen, cycle, std::memory_order_seq_cst)) {
  }
  if (seen >= cycle) return;  // someone asked for it first and woke everyone
  for (int r = 0; r < static_cast<int>(rings_.size()); ++r) {
    if (r != rank_) ring(r);
  }
}

std::uint64_t FutexCycleBell::requested() const {
  return at(requested_).load(std::memory_order_seq_cst);
}

void FutexCycleBell::wait(std::uint32_t ticket, Clock::time_point until) {
  const auto left = until - Clock::now();
  if (left <= Clock::duration::zero()) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  std::uint32_t* word = rings_[rank_];
  const std::uint32_t seen = at(word).fetch_or(kSleeping, std::memory_order_seq_cst);
  if ((seen & ~kSleeping) == ticket) {
    // Returns at once (EAGAIN) when the word moved on meanwhile; ETIMEDOUT and EINTR
    // just mean "look again".
    syscall(SYS_futex, word, FUTEX_WAIT, ticket | kSleeping, &ts, nullptr, 0);
  }
  at(word).fetch_and(~kSleeping, std::memory_order_seq_cst);
}

}  // namespace kolo::transport
