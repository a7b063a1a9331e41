// The shm transport's barrier: per-rank epoch counters in the segment, a futex to sleep
// on, deadlines, dead-rank detection and failure broadcast.
//
// sync(): rank r stores epoch e in its slot, bumps the wake word and calls FUTEX_WAKE only
// when the sleeper count says someone may be asleep. Then it spins ~30 us (pause, or
// sched_yield when ranks outnumber usable CPUs) until every slot >= e, then sleeps in
// FUTEX_WAIT with a 20 ms timeout, in a loop. The sleeper count is raised before the last
// check of the slots and the arriving rank reads it after storing its epoch (both
// sequentially consistent), so a wake-up cannot be lost; a stale wake word makes
// FUTEX_WAIT return at once.
//
// Failure: while waiting, the liveness of the missing ranks is checked every 20 ms (a free
// liveness lock, see shm_segment.h, or a pid that no longer exists = the process exited:
// fail at once), and the deadline bounds the wait. A missing rank's epoch is read again
// after its liveness: between the two it may have arrived, finished the collective with
// the others and left (its last call, at shutdown), and then it did take part. Failure
// messages give the missing ranks' last epochs beside the awaited one. The first rank that
// fails writes its message into the segment's Abort area and wakes everyone, so the other
// ranks fail at once too, quoting it. After a failure the barrier stays broken.
//
// Not for: data movement (shm_communicator.cc). One thread per rank uses a Barrier.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/communicator.h"
#include "transport/shm/shm_segment.h"

namespace kolo::transport::shm {

// What the segment keeps of a failure's `message` for the other ranks: all of it, or when
// longer than kAbortText - 1 bytes its first quarter and its end, " [...] " between.
std::string abort_text(const std::string& message);

// Publishes `message` as the segment's first failure, reported by `reporter`, and wakes
// every rank, so that their barriers fail at once quoting it (the first report wins;
// false when another was first). Safe from any thread: a Barrier's owner uses it through
// Barrier::abort, a thread that does not own the barrier (an abort from a watchdog) calls
// it directly.
bool publish_abort(const Segment& segment, int reporter, const std::string& message);

class Barrier {
 public:
  Barrier(const Segment* segment, int rank, int size);

  // Arrives at the next epoch and waits for every rank. `op` names the collective in the
  // error ("allreduce"). kPeerFailure names the ranks that did not arrive. `nudge` (if
  // set) is called with each rank that has not arrived, every few us (kNudge) of the spin:
  // the cycle's control_and wakes their lazily rung background threads (cycle_bell.h).
  Status sync(const char* op, Deadline deadline, const std::function<void(int)>* nudge = nullptr);

  // kPeerFailure with the first failure's message once broken, else OK.
  Status check(const char* op) const;
  // Breaks the barrier with `message` (a failure this rank found outside the segment, e.g.
  // in the cross-host phase of a hierarchical allreduce) and publishes it to the other
  // ranks, which fail at once. Returns kPeerFailure(message).
  Status abort(std::string message) { return fail("abort", std::move(message)); }
  // Names used for the ranks in messages: names[r] for rank r (the hierarchical transport
  // passes global ranks). Empty (the default): the ranks' own numbers.
  void set_rank_names(std::vector<int> names) { names_ = std::move(names); }
  // What messages call the collectives ("shm allreduce on rank 1 ..."); the device
  // layer's CUDA-IPC path says "cuda-ipc".
  void set_label(std::string label) { label_ = std::move(label); }
  // Polled while sync() sleeps (every 20 ms at most): returning true (with a reason) fails
  // the barrier like a dead rank would. The hierarchical transport's failure notices.
  void set_interrupt(std::function<bool(std::string* why)> interrupt) {
    interrupt_ = std::move(interrupt);
  }
  // Told about once a second while sync() of a control-plane call ("control_...") waits
  // (Communicator::set_wait_observer).
  void set_wait_observer(std::function<void(Clock::duration, const std::vector<int>&)> o) {
    observer_ = std::move(o);
  }
  // For tests: called on this rank's thread with each rank that has not arrived, just
  // before its liveness is checked (a test lets that rank arrive and leave meanwhile).
  void set_before_liveness_check(std::function<void(int rank)> hook) {
    before_liveness_ = std::move(hook);
  }
  bool broken() const { return !broken_.empty(); }
  std::uint64_t epoch() const { return epoch_; }

 private:
  bool all_arrived(std::uint64_t epoch) const;
  std::uint64_t epoch_of(int r) const;
  // " (it last arrived at barrier 4; this rank waits at barrier 5)" for the ranks `ranks`.
  std::string epochs_text(const std::vector<int>& ranks, std::uint64_t awaited) const;
  // Rank r's process is gone: its liveness lock is free, or its pid no longer exists.
  bool gone(int r) const;
  Status fail(const char* op, std::string message);
  // A failure another rank published in the segment, if any.
  bool aborted(const char* op, Status* out);
  std::string where(const char* op) const;

  const Segment* seg_;
  const int rank_;
  const int size_;
  bool oversubscribed_ = false;    // more ranks than CPUs this process may run on
  std::vector<bool> pid_visible_;  // kill(pid, 0) can tell whether rank r's process lives
  std::uint64_t epoch_ = 0;
  std::string broken_;
  // Rank r as named in messages (see set_rank_names).
  int name_of(int r) const { return r >= 0 && r < static_cast<int>(names_.size()) ? names_[r] : r; }
  std::vector<int> named(const std::vector<int>& ranks) const;

  std::vector<int> names_;
  std::string label_ = "shm";
  std::function<bool(std::string* why)> interrupt_;
  std::function<void(Clock::duration, const std::vector<int>&)> observer_;
  std::function<void(int)> before_liveness_;
  std::vector<int> missing_;  // scratch
};

}  // namespace kolo::transport::shm
