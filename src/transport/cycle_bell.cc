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

void FutexCycleBell::ring(int r) {
  at(rings_[r]).fetch_add(1, std::memory_order_seq_cst);
  // Not FUTEX_PRIVATE: the word may be shared between processes.
  syscall(SYS_futex, rings_[r], FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void FutexCycleBell::wake_local() { ring(rank_); }

std::uint32_t FutexCycleBell::ticket() const {
  return at(rings_[rank_]).load(std::memory_order_seq_cst);
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
  // Returns at once (EAGAIN) when the word moved on since `ticket`; ETIMEDOUT and EINTR
  // just mean "look again".
  syscall(SYS_futex, rings_[rank_], FUTEX_WAIT, ticket, &ts, nullptr, 0);
}

}  // namespace kolo::transport
