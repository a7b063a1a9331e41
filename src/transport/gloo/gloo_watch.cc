// What the Gloo transport does while a call is blocked in gloo, and how a rank learns
// that a peer failed:
//   - the Watchdog (gloo_internal.h) polls the call's interrupt every 20 ms and looks for
//     gone peers every 200 ms; a cause found shuts the communicator's sockets down, which
//     ends the blocked call at once (gloo sees EOF on its pairs) and tells the peers;
//   - gone_peers(): same-host peers whose process exited (kill(pid, 0), zombies
//     included), and the launcher's exit notices (launcher/exits, launcher/exit/<rank>);
//     failed_members(): a member's recorded failure ("failed", "fail/<rank>");
//   - a cause aborts the data wait under way (wait_data): gloo ends the waits of a failed
//     pair's pending messages, not that of a message partly transferred;
//   - failure notices over the store (create_failure_notices): announce() is one
//     compare_set of the world's "notice" key (the first announcement stays), then this
//     rank shuts every socket of its world down; received() is a try_get at most every
//     20 ms; fail() quotes another rank's announcement (announced_failure()) first.
//
// gloo's calls block, so set_interrupt's function is called from the watchdog's thread
// while the owning thread waits inside gloo (never at the same time as that thread's own
// use of it). The wait observer (set_wait_observer) is called on the waiting thread: about
// once a second the watchdog aborts rank 0's any-source control wait (abortWaitRecv ends
// only that wait; the receive stays posted); the waiting thread waits again, taking any
// message that completed as the abort landed, the watchdog aborts that wait 50 ms on, and
// the waiting thread calls the observer with the ranks still missing and waits on
// (GlooCommunicator::take_tick).
//
// Not for: the collectives (gloo_ops.cc, gloo_control.cc).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "transport/gloo/gloo_internal.h"

#include <algorithm>

namespace kolo::transport::gloo_impl {

using std::chrono::milliseconds;

Watchdog::Watchdog() : thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::begin(GlooCommunicator* comm) {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = comm;
  since_ = Clock::now();
  last_tick_ = since_;
  cause_.clear();
}

std::string Watchdog::end() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !checking_; });
  active_ = nullptr;
  std::string cause = std::move(cause_);
  cause_.clear();
  return cause;
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  Clock::time_point next_slow{};
  while (!stop_) {
    // A timed wait rather than a wake-up from begin(): a call costs no thread switch.
    cv_.wait_for(lock, milliseconds(20));
    if (stop_ || active_ == nullptr || !cause_.empty()) continue;
    const auto now = Clock::now();
    if (now - since_ < milliseconds(50)) continue;  // most calls end sooner
    GlooCommunicator* comm = active_;
    checking_ = true;
    lock.unlock();
    std::string why;
    if (comm->poll_interrupt(&why)) {
      why = "interrupted: " + why;
    } else if (now >= next_slow) {
      next_slow = now + milliseconds(200);
      why = comm->gone_peers(/*wait=*/false);
      if (why.empty()) why = comm->failed_members();
    }
    if (!why.empty()) {
      comm->shutdown_sockets();
    } else if (!comm->confirm_tick() && now - last_tick_ >= milliseconds(1000) &&
               comm->tick_observer()) {
      last_tick_ = now;
    }
    lock.lock();
    checking_ = false;
    if (!why.empty()) cause_ = why;
    cv_.notify_all();
  }
}

bool GlooCommunicator::poll_interrupt(std::string* why) { return interrupt_ && interrupt_(why); }

bool GlooCommunicator::tick_observer() {
  std::lock_guard<std::mutex> lock(waiting_mu_);
  if (waiting_ == nullptr || !has_observer_ || tick_ != Tick::kNone) return false;
  tick_ = Tick::kTicked;
  waiting_->abortWaitRecv();
  return true;
}

bool GlooCommunicator::confirm_tick() {
  std::lock_guard<std::mutex> lock(waiting_mu_);
  if (waiting_ == nullptr || tick_ != Tick::kLooking) return false;
  if (Clock::now() - looking_since_ < milliseconds(50)) return false;
  tick_ = Tick::kConfirmed;
  waiting_->abortWaitRecv();
  return true;
}

std::string GlooCommunicator::member_notices(std::vector<bool>* noticed) {
  const World& w = *world_;
  std::string v;
  bool found = false;
  if (!w.store->try_get(w.options.launcher_prefix + "/exits", &v, &found).ok() || !found ||
      std::atoll(v.c_str()) <= w.exits_at_start) {
    return "";
  }
  std::string notices;
  for (int m = 0; m < size(); ++m) {
    if (m == rank()) continue;
    std::string sentence;
    bool there = false;
    if (w.store
            ->try_get(w.options.launcher_prefix + "/exit/" + std::to_string(members_[m]), &sentence,
                      &there)
            .ok() &&
        there) {
      notices += (notices.empty() ? "" : "; ") + sentence;
      if (noticed != nullptr) (*noticed)[static_cast<std::size_t>(m)] = true;
    }
  }
  return notices;
}

std::string GlooCommunicator::failed_members() {
  std::string v;
  bool found = false;
  if (!store_->try_get("failed", &v, &found).ok() || !found) return "";
  for (int m = 0; m < size(); ++m) {
    if (m == rank()) continue;
    std::string why = recorded_failure(m);
    if (!why.empty()) return why;
  }
  return "";
}

std::string GlooCommunicator::recorded_failure(int member) {
  std::string reason;
  bool found = false;
  if (!store_->try_get("fail/" + std::to_string(member), &reason, &found).ok() || !found) return "";
  return member_name(member) + " failed first: " + reason;
}

std::string GlooCommunicator::launcher_exits() {
  const std::string notices = member_notices(nullptr);
  return notices.empty() ? "" : "the launcher reports: " + notices;
}

std::string GlooCommunicator::gone_peers(bool wait) {
  const World& w = *world_;
  std::vector<int> gone;
  std::vector<std::string> pids;
  for (int m = 0; m < size(); ++m) {
    if (m == rank()) continue;
    const PeerInfo& p = w.peers[static_cast<std::size_t>(members_[m])];
    if (p.host == w.my_host && process_gone(p.pid)) {
      gone.push_back(m);
      pids.push_back(std::to_string(p.pid));
    }
  }
  std::string notices;
  std::vector<bool> noticed(static_cast<std::size_t>(size()), false);
  if (w.options.launcher_notices) {
    // A peer whose process is seen gone here is posted by the launcher within
    // milliseconds, and its notice says why (a signal, an exit status): it is waited for
    // briefly (a rank that looked first named only "is gone", beside the others' signal).
    const auto patience = !gone.empty() ? milliseconds(500)
                          : wait        ? milliseconds(2000)
                                        : milliseconds(0);
    const Deadline until = Clock::now() + patience;
    for (;;) {
      std::fill(noticed.begin(), noticed.end(), false);
      notices = member_notices(&noticed);
      const bool all_noticed = std::all_of(
          gone.begin(), gone.end(), [&](int m) { return noticed[static_cast<std::size_t>(m)]; });
      if ((gone.empty() ? !notices.empty() : all_noticed) || Clock::now() >= until) break;
      std::this_thread::sleep_for(milliseconds(gone.empty() ? 50 : 10));
    }
  }
  // Every departure this rank knows of: the launcher may not have posted the first one to
  // die yet when a rank that noticed it has exited too (and been posted first), so peers
  // whose process is gone but who have no notice are named beside the notices.
  std::string text = notices.empty() ? "" : "the launcher reports: " + notices;
  for (std::size_t i = 0; i < gone.size(); ++i) {
    if (noticed[static_cast<std::size_t>(gone[i])]) continue;
    if (!text.empty()) text += "; ";
    text += member_name(gone[i]) + " is gone (its process " + pids[i] + " on this host has exited)";
  }
  return text;
}

void GlooCommunicator::shutdown_sockets() {
  {
    std::lock_guard<std::mutex> lock(waiting_mu_);
    sockets_down_ = true;
    if (waiting_ != nullptr) waiting_->abortWaitRecv();
    if (data_wait_ != nullptr) {
      if (data_wait_send_) {
        data_wait_->abortWaitSend();
      } else {
        data_wait_->abortWaitRecv();
      }
    }
  }
  for (const PairSocket& s : sockets_) {
    // gloo may have closed the socket and the kernel given its number to another: check.
    char target[64];
    const std::string path = "/proc/self/fd/" + std::to_string(s.fd);
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::string(target) != "socket:[" + std::to_string(s.inode) + "]") continue;
    ::shutdown(s.fd, SHUT_RDWR);
  }
}

bool GlooCommunicator::wait_data(::gloo::transport::UnboundBuffer* buffer, bool send,
                                 Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(waiting_mu_);
    if (sockets_down_) return false;
    data_wait_ = buffer;
    data_wait_send_ = send;
  }
  struct Clear {
    GlooCommunicator* c;
    ~Clear() {
      std::lock_guard<std::mutex> lock(c->waiting_mu_);
      c->data_wait_ = nullptr;
    }
  } clear{this};
  return send ? buffer->waitSend(timeout(deadline)) : buffer->waitRecv(timeout(deadline));
}

namespace {

class GlooNotices final : public FailureNotices {
 public:
  GlooNotices(std::shared_ptr<World> world, std::shared_ptr<rendezvous::Store> store, int rank)
      : world_(std::move(world)), store_(std::move(store)), rank_(rank) {}

  void announce(const std::string& message) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (announced_ || !text_.empty()) return;
    announced_ = true;
    std::string actual;
    (void)store_->compare_set("notice", "",
                              "rank " + std::to_string(rank_) + " reported: " + message, &actual);
    // This rank is failing: its peers blocked in gloo with it fail now, not at their deadline.
    std::lock_guard<std::mutex> comms(world_->comms_mu);
    for (GlooCommunicator* c : world_->comms) c->shutdown_sockets();
  }

  bool received(std::string* message) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (text_.empty()) {
      if (announced_) return false;
      const auto now = Clock::now();
      if (now < next_poll_) return false;
      next_poll_ = now + milliseconds(20);
      bool found = false;
      std::string value;
      if (!store_->try_get("notice", &value, &found).ok() || !found) return false;
      text_ = value;
    }
    *message = text_;
    return true;
  }

 private:
  std::shared_ptr<World> world_;
  std::shared_ptr<rendezvous::Store> store_;
  const int rank_;
  std::mutex mu_;
  bool announced_ = false;
  std::string text_;
  Clock::time_point next_poll_{};
};

}  // namespace

Status GlooCommunicator::create_failure_notices(std::unique_ptr<FailureNotices>* out) {
  KOLO_RETURN_IF_ERROR(check_usable("create_failure_notices"));
  *out = std::make_unique<GlooNotices>(world_, store_, rank());
  world_->notice_store = store_;
  world_->own_notice = "rank " + std::to_string(rank()) + " reported: ";
  return Status::OK();
}

std::string GlooCommunicator::announced_failure() {
  const World& w = *world_;
  if (w.notice_store == nullptr) return "";
  std::string text;
  bool found = false;
  if (!w.notice_store->try_get("notice", &text, &found).ok() || !found) return "";
  return text.rfind(w.own_notice, 0) == 0 ? "" : text;
}

}  // namespace kolo::transport::gloo_impl
