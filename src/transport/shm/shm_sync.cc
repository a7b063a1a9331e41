// The shm transport's epoch barrier (see shm_sync.h for the protocol).
//
// Not for: anything that moves data.
#include "transport/shm/shm_sync.h"
#include "common/format.h"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace kolo::transport::shm {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// Spinning first keeps a lockstep barrier in the microseconds; past that, sleeping costs
// a ~5-20 us wake-up but frees the core (ranks often outnumber cores).
constexpr microseconds kSpin(30);
// A rank that has not arrived by then in a cycle's control_and may sleep lightly with the
// cycle's request unheard (a lazy bell): sync() nudges it, and again every kNudge while
// it spins (a nudge finds a rank whose caller was awake, and that caller may have left
// since without running the cycle). Lockstep ranks arrive within a few microseconds of
// each other; this much more costs a rank that was busy elsewhere little beside its
// wake-up (5-20 us). A nudge to an awake rank costs a load.
constexpr microseconds kNudge(5);
// Longest single sleep, and the period of the liveness checks: a dead rank is noticed
// within about this long.
constexpr milliseconds kNap(20);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void futex_wait(std::uint32_t* word, std::uint32_t expected, Clock::duration timeout) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  // Not FUTEX_PRIVATE: the word is shared between processes. EAGAIN (the word changed),
  // ETIMEDOUT and EINTR all just mean "look again".
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

std::string seconds_string(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

Barrier::Barrier(const Segment* segment, int rank, int size)
    : seg_(segment), rank_(rank), size_(size) {
  cpu_set_t cpus;
  const int usable = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
  oversubscribed_ = usable > 0 && size > usable;
  // kill(pid, 0) is a second death signal, for peers whose pid this process can see now
  // (not in another PID namespace): a forked child that inherited the segment's file
  // keeps a dead parent's liveness lock held.
  pid_visible_.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    const pid_t pid = at(seg_->slot(r).pid).load(std::memory_order_relaxed);
    pid_visible_[r] = pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
  }
}

bool Barrier::gone(int r) const {
  if (!seg_->alive(r)) return true;
  if (!pid_visible_[r]) return false;
  const pid_t pid = at(seg_->slot(r).pid).load(std::memory_order_relaxed);
  return kill(pid, 0) != 0 && errno == ESRCH;
}

std::vector<int> Barrier::named(const std::vector<int>& ranks) const {
  std::vector<int> out;
  for (int r : ranks) out.push_back(name_of(r));
  return out;
}

std::string Barrier::where(const char* op) const {
  if (!names_.empty()) {
    return label_ + " " + op + " on rank " + std::to_string(name_of(rank_)) + " (local rank " +
           std::to_string(rank_) + " of " + std::to_string(size_) + "): ";
  }
  return label_ + " " + op + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
         ": ";
}

Status Barrier::check(const char* op) const {
  if (broken_.empty()) return Status::OK();
  return PeerFailure(where(op) + "the transport failed earlier: " + broken_);
}

std::uint64_t Barrier::epoch_of(int r) const {
  return at(seg_->slot(r).epoch).load(std::memory_order_seq_cst);
}

bool Barrier::all_arrived(std::uint64_t epoch) const {
  for (int r = 0; r < size_; ++r) {
    if (epoch_of(r) < epoch) return false;
  }
  return true;
}

std::string Barrier::epochs_text(const std::vector<int>& ranks, std::uint64_t awaited) const {
  std::string last;
  for (int r : ranks) {
    if (!last.empty()) last += ", ";
    last += std::to_string(epoch_of(r));
  }
  return std::string(ranks.size() == 1 ? " (it last arrived at barrier "
                                       : " (they last arrived at barriers ") +
         last + "; this rank waits at barrier " + std::to_string(awaited) + ")";
}

std::string abort_text(const std::string& message) {
  if (message.size() <= kAbortText - 1) return message;
  // A relayed failure ends with its cause (the rank that is gone): keep the end, and the
  // head that says where this rank was.
  static constexpr char kCut[] = " [...] ";
  const std::size_t head = (kAbortText - 1) / 4;
  const std::size_t tail = kAbortText - 1 - head - (sizeof(kCut) - 1);
  return message.substr(0, head) + kCut + message.substr(message.size() - tail);
}

bool publish_abort(const Segment& segment, int reporter, const std::string& message) {
  Abort& a = segment.abort();
  std::uint32_t expected = 0;
  if (!at(a.state).compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return false;
  a.reporter = reporter;
  const std::string text = abort_text(message);
  std::memcpy(a.text, text.data(), text.size());
  a.text[text.size()] = '\0';
  at(a.state).store(2, std::memory_order_release);
  at(segment.wake().word).fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&segment.wake().word);
  return true;
}

Status Barrier::fail(const char* op, std::string message) {
  (void)op;
  broken_ = message;
  publish_abort(*seg_, rank_, message);
  return PeerFailure(std::move(message));
}

bool Barrier::aborted(const char* op, Status* out) {
  Abort& a = seg_->abort();
  if (at(a.state).load(std::memory_order_acquire) != 2) return false;
  broken_ = where(op) + "rank " + std::to_string(name_of(a.reporter)) + " reported: " + a.text;
  *out = PeerFailure(broken_);
  return true;
}

Status Barrier::sync(const char* op, Deadline deadline, const std::function<void(int)>* nudge) {
  if (!broken_.empty()) return check(op);
  const std::uint64_t e = ++epoch_;
  Wake& w = seg_->wake();
  at(seg_->slot(rank_).epoch).store(e, std::memory_order_seq_cst);
  at(w.word).fetch_add(1, std::memory_order_seq_cst);
  if (at(w.sleepers).load(std::memory_order_seq_cst) != 0) futex_wake_all(&w.word);

  const auto start = Clock::now();
  auto next_nudge = start + kNudge;
  for (;;) {
    if (all_arrived(e)) return Status::OK();
    const auto now = Clock::now();
    if (nudge != nullptr && now >= next_nudge) {
      for (int r = 0; r < size_; ++r) {
        if (epoch_of(r) < e) (*nudge)(r);
      }
      next_nudge = now + kNudge;
    }
    if (now - start >= kSpin) break;
    if (oversubscribed_) {
      sched_yield();  // the rank we wait for may be waiting for this core
    } else {
      for (int i = 0; i < 8; ++i) cpu_relax();
    }
  }

  auto next_check = Clock::now();
  const bool observed = observer_ && std::strncmp(op, "control", 7) == 0;
  auto next_report = start + std::chrono::seconds(1);
  for (;;) {
    const std::uint32_t seen = at(w.word).load(std::memory_order_seq_cst);
    at(w.sleepers).fetch_add(1, std::memory_order_seq_cst);
    struct Leave {  // the sleeper count drops on every way out of this iteration
      std::uint32_t* sleepers;
      ~Leave() { at(*sleepers).fetch_sub(1, std::memory_order_seq_cst); }
    } leave{&w.sleepers};
    if (all_arrived(e)) return Status::OK();
    Status aborted_status;
    if (aborted(op, &aborted_status)) return aborted_status;
    if (std::string why; interrupt_ && interrupt_(&why)) return fail(op, where(op) + why);
    const auto now = Clock::now();
    if (now >= next_check || now >= deadline) {
      next_check = now + kNap;
      missing_.clear();
      std::vector<int> dead;
      std::string pids;
      for (int r = 0; r < size_; ++r) {
        if (epoch_of(r) >= e) continue;
        if (before_liveness_) before_liveness_(r);
        const bool left = gone(r);
        // Read again after the liveness: r may have arrived since the read above, finished
        // this collective (every rank had arrived) and left, its last call (shutdown). A
        // rank stores its epoch before it drops its lock or exits, so a rank seen gone
        // here with an older epoch did leave without taking part.
        if (epoch_of(r) >= e) continue;
        missing_.push_back(r);
        if (left) {
          dead.push_back(r);
          if (!pids.empty()) pids += ", ";
          pids += std::to_string(at(seg_->slot(r).pid).load(std::memory_order_relaxed));
        }
      }
      if (missing_.empty()) return Status::OK();
      // A rank may publish its failure and exit between the check above and this one:
      // its message is the cause, its exit only the consequence.
      if (!dead.empty() && aborted(op, &aborted_status)) return aborted_status;
      if (!dead.empty()) {
        return fail(op, where(op) + ranks_string(named(dead)) + " did not take part: " +
                            (dead.size() == 1 ? "its process (pid " : "their processes (pids ") +
                            pids + ") exited" + epochs_text(dead, e));
      }
      if (observed && now >= next_report && now < deadline) {
        next_report = now + std::chrono::seconds(1);
        observer_(now - start, named(missing_));
      }
      if (now >= deadline) {
        return fail(op, where(op) + ranks_string(named(missing_)) + " did not take part within " +
                            seconds_string(now - start) +
                            " (hung, or not calling this collective?)" + epochs_text(missing_, e));
      }
    }
    futex_wait(&w.word, seen, std::min<Clock::duration>(kNap, deadline - now));
  }
}

}  // namespace kolo::transport::shm
