// Cycle pacing: when the runtime's background thread starts its next negotiation cycle,
// and with which of this rank's new requests.
//
// Requests arrive in the Inbox from any thread (with the stop and hold flags). The Pacer,
// used by the background thread only, waits for the next cycle: without a CycleBell a
// rank cycles every kMinIdleWait (or the cycle time) while any rank is busy, backing off
// to kMaxIdleWait while every rank is idle (negotiation is collective, so every rank
// runs every cycle); with a bell it sleeps until some rank asks for a cycle because it
// has new work, or a heartbeat passes while its own operations wait for other ranks.
// KOLO_CYCLE_TIME_MS holds back work that arrives soon after the previous cycle began,
// so that it is negotiated and fused with what follows. Not for: what a cycle does
// (Runtime's cycle step, controller.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "core/message.h"
#include "transport/cycle_bell.h"

namespace kolo::core {

// Any thread. Rings the bell (when set) on every change, so a sleeping pacer wakes.
class Inbox {
 public:
  // Queues a request. False (and nothing queued) once stop was requested.
  bool push(Request request);
  // Idempotent; `at_exit` of the first call is kept (the program is ending without
  // kolo::shutdown()).
  void request_stop(bool at_exit);
  bool stop_requested() const;
  bool stop_at_exit() const;
  // While held, queued requests stay queued (for tests: everything submitted meanwhile
  // enters negotiation in one cycle).
  void hold(bool hold);
  // The bell of on-demand cycling; null while there is none or once the communicator
  // that owns it is gone.
  void set_bell(transport::CycleBell* bell);
  bool has_bell() const;
  // Whether requests wait to be taken (not held back by hold()), or stop was requested.
  bool has_work_now() const;
  // Rings the bell (when set) if `force`, or if a cycle is due: requests wait, or some
  // rank asked for a cycle after the first `cycles` (a caller leaving the CycleGate).
  void wake_if(bool force, std::uint64_t cycles);
  // Drops the queued requests (their handles are failed by the runtime).
  void clear();

 private:
  friend class Pacer;
  bool has_work() const KOLO_REQUIRES(mu_) { return !requests_.empty() && !hold_; }

  mutable std::mutex mu_;
  std::condition_variable cv_;  // new requests, stop or release of a hold
  std::vector<Request> requests_ KOLO_GUARDED_BY(mu_);
  bool stop_ KOLO_GUARDED_BY(mu_) = false;
  bool stop_at_exit_ KOLO_GUARDED_BY(mu_) = false;
  bool hold_ KOLO_GUARDED_BY(mu_) = false;
  transport::CycleBell* bell_ KOLO_GUARDED_BY(mu_) = nullptr;
};

// Who runs the next negotiation cycle: the background thread, or a thread blocked in
// Handle::wait() (caller-run cycles, runtime.h). Whoever runs a cycle, or looks at the
// Pacer's state, holds `mu`; the background thread lets go of it only while it sleeps.
struct CycleGate {
  std::mutex mu;
  std::atomic<bool> helper{false};  // a waiting caller holds `mu`
  bool ended = false;               // (mu) a caller's cycle ended the loop: the thread stops
  // How long the last cycle took (steady_clock ticks; read without `mu`): whoever finds
  // `mu` held waits for it according to it (relock_lightly, helper_look).
  std::atomic<std::chrono::steady_clock::rep> last_cycle_ticks{0};
  std::chrono::steady_clock::duration last_cycle() const {
    return std::chrono::steady_clock::duration(last_cycle_ticks.load(std::memory_order_relaxed));
  }
};

// A thread that finds the gate held by a caller running cycles waits for it:
// - the background thread (Pacer::relock) in a light nap while the caller's cycles are
//   recent (the last one started less than 200 us ago) and short (it took less than the
//   100 us nap), deeply otherwise;
// - a waiting caller (Runtime::Helper) by looking again for up to 30 us when the last
//   cycle was shorter than that, not at all otherwise.
// A long cycle outlasts either look, and each extra wake-up or yield took a core from the
// ranks' cycles (4 MiB allreduces: ~20% more context switches, ~10% of their bandwidth).
bool relock_lightly(std::chrono::steady_clock::duration since_last_start,
                    std::chrono::steady_clock::duration last_cycle);
std::chrono::steady_clock::duration helper_look(std::chrono::steady_clock::duration last_cycle);

// Used under the CycleGate when there is one (else by the background thread only).
class Pacer {
 public:
  // `bell`: on-demand cycling (null: timer-driven, as over MPI).
  Pacer(Inbox& inbox, transport::CycleBell* bell);

  struct Work {
    bool stop = false;                             // shutdown was requested
    std::map<int, std::vector<Request>> requests;  // new requests, by process set
    std::vector<std::string> taken;                // their names, when `timeline`
  };
  // Waits until the next cycle is due and starts it. `waiting`: operations of this rank
  // wait for other ranks (bell: keep a heartbeat); `must_cycle`: the controller has news
  // for the next cycle (bell); `timeline`: also return the names taken.
  // With a gate (set_gate), it is held on entry and on return, and let go while asleep.
  Work next(double cycle_time_ms, bool waiting, const bool& must_cycle, bool timeline);
  // A caller that holds the gate: starts the next cycle if one is due now (another rank
  // asked for it, or this rank has news), without waiting; false when none is (or when
  // KOLO_CYCLE_TIME_MS > 0 holds work back: the background thread paces that).
  bool try_start(double cycle_time_ms, bool must_cycle, bool timeline, Work* work);
  void set_gate(CycleGate* gate) { gate_ = gate; }
  // With a gate: whether this rank's operations wait for other ranks, asked while the
  // pacer waits (a caller's cycles change it).
  void set_waiting_probe(std::function<bool()> probe) { waiting_ = std::move(probe); }
  transport::CycleBell* bell() const { return bell_; }
  // After each cycle: `idle` (no work anywhere) lengthens the timer's wait.
  void cycle_done(bool idle);

  std::uint64_t cycle_number() const { return cycle_number_; }  // cycles started
  std::chrono::steady_clock::time_point cycle_start() const { return last_start(); }

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  void wait_for_work(std::chrono::steady_clock::duration idle_wait, TimePoint not_before,
                     bool timeline, Work* work);
  void wait_for_cycle(const bool& must_cycle, bool waiting, TimePoint not_before, bool timeline,
                      Work* work);
  // Takes the gate back after a sleep (see next()): at once when it is free, else sleeps
  // on the bell while a caller holds it (it rings when it leaves work behind).
  void relock();
  // Asks the other ranks for the next cycle unless one did, and takes this rank's work.
  void start(bool ask, TimePoint not_before, bool timeline, Work* work);
  // When the last cycle started (relock() reads it without the gate).
  TimePoint last_start() const {
    return TimePoint(TimePoint::duration(last_start_ticks_.load(std::memory_order_relaxed)));
  }
  void set_last_start(TimePoint t) {
    last_start_ticks_.store(t.time_since_epoch().count(), std::memory_order_relaxed);
  }
  // Moves the queued requests (unless held) into `work`.
  void take(bool timeline, Work* work) KOLO_REQUIRES(inbox_.mu_);

  Inbox& inbox_;
  transport::CycleBell* const bell_;
  CycleGate* gate_ = nullptr;
  std::function<bool()> waiting_;
  std::chrono::steady_clock::duration idle_wait_;
  std::atomic<TimePoint::rep> last_start_ticks_{0};  // see last_start()
  std::uint64_t cycle_number_ = 0;
};

}  // namespace kolo::core
