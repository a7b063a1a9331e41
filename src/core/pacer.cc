#include "core/pacer.h"

#include <algorithm>

namespace kolo::core {

namespace {

// Waits between cycles without local work (timer pacing).
constexpr std::chrono::milliseconds kMinIdleWait(1);
constexpr std::chrono::milliseconds kMaxIdleWait(8);
// On-demand cycling: while this rank has operations waiting for other ranks it still asks
// for a cycle this often, so that time-based checks (stall warnings, stall shutdown,
// renegotiation of long-waiting cache hits) keep running.
constexpr std::chrono::milliseconds kHeartbeat(100);
// Bounds each sleep on the bell, so that a lost wake-up (there should be none) costs at
// most this.
constexpr std::chrono::seconds kLongestSleep(1);
// Within kActive of the last cycle's start the background thread sleeps lightly: it looks
// again after kLightNap on its own, so a submit does not have to wake it (a caller that
// waits at once runs the cycle itself; one that does not waits at most this long). Short:
// with 2 ms (and local work deferred by one more nap) the light naps of a CNN training
// step's backward pass and optimizer step cost ~15% of its images/s on 2 cores (issue 17,
// docs/history/benchmarks.md); 200 us keeps a back-to-back submit-and-wait loop in light naps.
constexpr std::chrono::microseconds kActive(200);
constexpr std::chrono::microseconds kLightNap(100);

constexpr std::chrono::microseconds kHelperLook(30);

}  // namespace

bool relock_lightly(std::chrono::steady_clock::duration since_last_start,
                    std::chrono::steady_clock::duration last_cycle) {
  return since_last_start < kActive && last_cycle < kLightNap;
}

std::chrono::steady_clock::duration helper_look(std::chrono::steady_clock::duration last_cycle) {
  return last_cycle < kHelperLook ? std::chrono::steady_clock::duration(kHelperLook)
                                  : std::chrono::steady_clock::duration::zero();
}

Pacer::Pacer(Inbox& inbox, transport::CycleBell* bell)
    : inbox_(inbox), bell_(bell), idle_wait_(kMinIdleWait) {}

bool Inbox::push(Request request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return false;
  requests_.push_back(std::move(request));
  if (bell_) bell_->wake_local();
  cv_.notify_one();
  return true;
}

void Inbox::request_stop(bool at_exit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) stop_at_exit_ = at_exit;
    stop_ = true;
    if (bell_) bell_->wake_local(true);
  }
  cv_.notify_all();
}

bool Inbox::stop_requested() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

bool Inbox::stop_at_exit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_at_exit_;
}

void Inbox::hold(bool hold) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = hold;
    if (bell_) bell_->wake_local(true);
  }
  cv_.notify_all();
}

void Inbox::set_bell(transport::CycleBell* bell) {
  std::lock_guard<std::mutex> lock(mu_);
  bell_ = bell;
}

bool Inbox::has_work_now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return has_work() || stop_;
}

void Inbox::wake_if(bool force, std::uint64_t cycles) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!bell_) return;
  // Even from a light nap: what the caller leaves is due now, and a nap would add up to
  // kLightNap to it (the p90 of the 4-byte latency was ~100 us).
  if (force || has_work() || stop_) {
    bell_->wake_local(true);
  } else if (bell_->requested() > cycles) {
    // Another rank's cycle: in a back-to-back loop this rank's caller is back in a moment
    // and runs it; a woken background thread would race it for the gate and the cores. A
    // light nap is left to the peer, which nudges this rank when it does not come
    // (cycle_bell.h); a deep sleep is woken now.
    bell_->wake_local(false);
  }
}

bool Inbox::has_bell() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bell_ != nullptr;
}

void Inbox::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  requests_.clear();
}

Pacer::Work Pacer::next(double cycle_time_ms, bool waiting, const bool& must_cycle, bool timeline) {
  const auto cycle_time = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::milli>(cycle_time_ms));
  Work work;
  if (bell_) {
    wait_for_cycle(must_cycle, waiting, last_start() + cycle_time, timeline, &work);
    if (gate_ && gate_->ended) return work;  // no cycle: the runtime stops
  } else {
    wait_for_work(std::max<std::chrono::steady_clock::duration>(idle_wait_, cycle_time),
                  last_start() + cycle_time, timeline, &work);
  }
  set_last_start(std::chrono::steady_clock::now());
  ++cycle_number_;
  return work;
}

void Pacer::cycle_done(bool idle) {
  if (gate_ != nullptr) {
    gate_->last_cycle_ticks.store((std::chrono::steady_clock::now() - last_start()).count(),
                                  std::memory_order_relaxed);
  }
  // The back-off costs no latency when ranks submit together (each wakes on its own work)
  // and keeps an idle runtime from taking a tenth of a core.
  idle_wait_ = idle ? std::min<std::chrono::steady_clock::duration>(idle_wait_ * 2, kMaxIdleWait)
                    : std::chrono::steady_clock::duration(kMinIdleWait);
}

void Pacer::wait_for_work(std::chrono::steady_clock::duration idle_wait, TimePoint not_before,
                          bool timeline, Work* work) {
  std::unique_lock<std::mutex> lock(inbox_.mu_);
  inbox_.cv_.wait_for(lock, idle_wait, [this] { return inbox_.has_work() || inbox_.stop_; });
  // KOLO_CYCLE_TIME_MS: work that arrives soon after the previous cycle began waits for
  // more to come, so it is negotiated (and fused) together.
  if (!inbox_.requests_.empty() && std::chrono::steady_clock::now() < not_before) {
    inbox_.cv_.wait_until(lock, not_before, [this] { return inbox_.stop_; });
  }
  take(timeline, work);
}

void Pacer::wait_for_cycle(const bool& must_cycle, bool waiting, TimePoint not_before,
                           bool timeline, Work* work) {
  transport::CycleBell& bell = *bell_;
  bool ask = false;
  for (;;) {
    // The ticket is read before looking, so news that comes after the look ends the wait.
    // A caller may have run cycles while this thread slept: the count is read each time.
    const std::uint32_t ticket = bell.ticket();
    if (gate_ && gate_->ended) return;
    if (bell.requested() > cycle_number_) break;
    const auto now = std::chrono::steady_clock::now();
    // A caller's cycles may have started operations that now wait for other ranks (or
    // finished them): the waiting probe is asked each time, and the heartbeat runs from
    // the last cycle's start, whoever ran it.
    if (waiting_) waiting = waiting_();
    const TimePoint heartbeat = waiting ? last_start() + kHeartbeat : TimePoint::max();
    ask = must_cycle || now >= heartbeat || inbox_.has_work_now();
    if (ask) break;
    const bool light = gate_ != nullptr && now - last_start() < kActive;
    const TimePoint until = std::min(heartbeat, now + (light ? kLightNap : kLongestSleep));
    if (gate_) gate_->mu.unlock();
    bell.wait(ticket, until, light);
    if (gate_) relock();
  }
  start(ask, not_before, timeline, work);
}

void Pacer::relock() {
  for (;;) {
    if (gate_->mu.try_lock()) return;
    const std::uint32_t ticket = bell_->ticket();
    // Not a caller: the one that holds it is leaving (it clears `helper` first).
    if (!gate_->helper.load(std::memory_order_seq_cst)) {
      gate_->mu.lock();
      return;
    }
    // While the caller's cycles are recent, a light nap: a deep one is woken by each
    // submit of this rank, which in a back-to-back loop comes between two of the caller's
    // waits, and takes a core the other ranks' cycles need (the 4-byte latency's p90 went
    // from ~3 to 20-30 us). Past kActive a deep sleep: a light one would wake this thread
    // every kLightNap for as long as a long cycle takes (a 30 ms allreduce: 300 times).
    // Only while the cycles are short, too: a cycle longer than kLightNap would wake it
    // once per nap where a deep sleep costs one ring per submit (relock_lightly). The
    // caller rings even a light nap when it leaves work that is due.
    const auto now = std::chrono::steady_clock::now();
    const bool light = relock_lightly(now - last_start(), gate_->last_cycle());
    bell_->wait(ticket, now + (light ? kLightNap : kLongestSleep), light);
  }
}

void Pacer::start(bool ask, TimePoint not_before, bool timeline, Work* work) {
  transport::CycleBell& bell = *bell_;
  const std::uint64_t done = cycle_number_;
  std::unique_lock<std::mutex> lock(inbox_.mu_);
  if (ask) {
    // KOLO_CYCLE_TIME_MS, as in wait_for_work. Another rank's request is not delayed: it
    // is already waiting in the cycle.
    if (bell.requested() <= done && std::chrono::steady_clock::now() < not_before) {
      inbox_.cv_.wait_until(lock, not_before, [this] { return inbox_.stop_; });
    }
    bell.request(done + 1);
  }
  take(timeline, work);
}

bool Pacer::try_start(double cycle_time_ms, bool must_cycle, bool timeline, Work* work) {
  if (!bell_ || cycle_time_ms > 0) return false;
  const bool asked = bell_->requested() > cycle_number_;
  const bool ask = !asked && (must_cycle || inbox_.has_work_now());
  if (!asked && !ask) return false;
  start(ask, TimePoint{}, timeline, work);
  set_last_start(std::chrono::steady_clock::now());
  ++cycle_number_;
  return true;
}

void Pacer::take(bool timeline, Work* work) {
  work->stop = inbox_.stop_;
  if (inbox_.hold_) return;
  for (auto& r : inbox_.requests_) {
    if (timeline) work->taken.push_back(r.name);
    work->requests[r.process_set].push_back(std::move(r));
  }
  inbox_.requests_.clear();
}

}  // namespace kolo::core
