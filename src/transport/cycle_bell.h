// CycleBell: lets the runtime run a negotiation cycle only when some rank has something new,
// instead of every rank waking on a timer to find out.
//
// Negotiation cycles are collective (every rank takes part in each one), so the ranks must
// agree on how many there are. Cycles are numbered 1, 2, ...; `requested` is the highest
// number any rank asked for. A rank that has run `done` cycles and has new work calls
// request(done + 1), which wakes every other rank; every rank runs cycle done + 1 once
// requested() > done. No rank can ask for done + 2 before every rank finished cycle done + 1
// (it cannot finish without them), so all ranks run the same cycles. The background thread
// sleeps in wait() between cycles; the submitting thread calls wake_local() after queueing.
//
// FutexCycleBell keeps its words in memory the ranks share (a shm segment's slots, or an
// in-process world's heap) and sleeps on a futex per rank, so it works across processes.
// Ringing a rank that is awake costs no system call (bit 0 of its word says it sleeps);
// hence one thread per rank waits on it (the background thread).
// Not for: deciding whether a cycle is needed (the runtime), or peer failure detection
// (a dead peer shows up in the cycle's control_and, which has a deadline).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace kolo::transport {

class CycleBell {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~CycleBell() = default;

  // Any thread of this rank: wakes this rank's wait() (its thread has local work to look at).
  // A light sleep is left to end on its own unless `even_light` (work that is due now: a
  // caller handing its unfinished cycles back, a stop).
  virtual void wake_local(bool even_light) = 0;
  void wake_local() { wake_local(false); }
  // The value to pass to wait(): read it before checking for work, so that work queued
  // after the check wakes the wait.
  virtual std::uint32_t ticket() const = 0;
  // Background thread: asks every rank for cycle `cycle` (raises requested(), wakes them).
  virtual void request(std::uint64_t cycle) = 0;
  // The highest cycle number any rank requested so far.
  virtual std::uint64_t requested() const = 0;
  // Background thread: sleeps until wake_local(), request() by another rank, or `until`,
  // unless something happened since `ticket` was read. May return early (spuriously).
  // `light`: the caller looks again by `until` (soon) on its own, so wake_local() need not
  // wake it (a submit then costs no system call); request() by another rank still does.
  virtual void wait(std::uint32_t ticket, Clock::time_point until, bool light) = 0;
  void wait(std::uint32_t ticket, Clock::time_point until) { wait(ticket, until, false); }
  // A thread of this rank other than the sleeper (a caller running cycles) watches
  // requested() and its own work while `awake`: rings then wake no one. After clearing it,
  // that thread rings wake_local() if it leaves anything due.
  virtual void set_helper_awake(bool awake) = 0;
  // A rank waiting in a cycle for rank r (which has not arrived): wakes r's sleeper if it
  // sleeps. For lazy bells (below); a spurious wake-up otherwise.
  virtual void nudge(int r) = 0;
};

class FutexCycleBell final : public CycleBell {
 public:
  // `requested`: one word shared by all ranks; `rings[r]`: rank r's futex word (at least a
  // cache line apart, zero-initialised, alive as long as the bell). `rank` is this rank.
  // `lazy`: request() leaves light sleeps to end on their own too, and the transport
  // nudges ranks that do not arrive in the cycle soon (shm: its control_and barrier).
  // Between two waits of a back-to-back loop another rank's request finds a rank's caller
  // away for a moment, and the wake-up of its background thread (which then has nothing to
  // do: the caller runs the cycle) took the core a rank needed: 1 iteration in 10 took
  // 20-40 us on 2 cores instead of 2.5 (docs/history/benchmarks.md, issue 17).
  FutexCycleBell(std::uint64_t* requested, std::vector<std::uint32_t*> rings, int rank,
                 bool lazy = false);

  void wake_local(bool even_light) override;
  using CycleBell::wake_local;
  std::uint32_t ticket() const override;
  void request(std::uint64_t cycle) override;
  std::uint64_t requested() const override;
  void wait(std::uint32_t ticket, Clock::time_point until, bool light) override;
  using CycleBell::wait;
  void set_helper_awake(bool awake) override;
  void nudge(int r) override;

 private:
  void ring(int r, std::uint32_t quiet);

  std::uint64_t* requested_;
  std::vector<std::uint32_t*> rings_;
  int rank_;
  bool lazy_;
};

}  // namespace kolo::transport
