// The Gloo transport's control plane (negotiation), rooted at rank 0, on point-to-point
// messages over gloo's unbound buffers (so that rank 0 knows who did not take part):
//
//   control_and        every rank sends its words to rank 0, which receives them from any
//                      rank in arrival order, ANDs them and sends the result back
//   control_gather     an 8-byte length from every rank (any order), then the payloads
//   control_broadcast  rank 0 sends an 8-byte length, then the payload, to every rank
//
// A rank 0 whose wait runs out names the ranks it has not heard from; it writes that to
// the store and shuts its sockets down (fail()), so the other ranks, blocked on rank 0,
// fail at once quoting it. A rank whose wait for rank 0 runs out names rank 0.
// Messages are never empty (gloo's buffers want bytes), hence the length headers.
//
// Not for: the data plane (gloo_ops.cc).
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "common/format.h"
#include "transport/gloo/gloo_internal.h"

namespace kolo::transport::gloo_impl {
namespace {

using ::gloo::transport::UnboundBuffer;

bool is_timeout(const std::exception& e) { return std::strstr(e.what(), "imed out") != nullptr; }

std::string seconds_text(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

bool GlooCommunicator::take_tick(Clock::duration waited, const std::vector<int>& missing) {
  {
    std::lock_guard<std::mutex> lock(waiting_mu_);
    if (tick_ == Tick::kTicked) {
      tick_ = Tick::kLooking;
      looking_since_ = Clock::now();
      return true;
    }
    if (tick_ != Tick::kConfirmed) return false;
    tick_ = Tick::kNone;
  }
  if (observer_) observer_(waited, missing);
  return true;
}

void GlooCommunicator::test_tick_race() {
  static const bool on = [] {
    const char* v = std::getenv("KOLO_TEST_TICK_RACE");
    return v != nullptr && std::string(v) == "1";
  }();
  if (!on) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::lock_guard<std::mutex> lock(waiting_mu_);
  if (waiting_ == nullptr || !has_observer_ || tick_ != Tick::kNone) return;
  tick_ = Tick::kTicked;
  waiting_->abortWaitRecv();
}

Status GlooCommunicator::control_and(std::vector<std::uint64_t>& words, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("control_and"));
  if (size() == 1) return Status::OK();
  const std::size_t w = std::max<std::size_t>(words.size(), 1);
  const std::size_t bytes = w * sizeof(std::uint64_t);
  const std::uint64_t slot = next_slot();
  const auto start = Clock::now();
  return guarded("control_and", deadline, [&]() -> Status {
    words_.assign(2 * w, ~std::uint64_t{0});
    std::uint64_t* in = words_.data();
    std::uint64_t* out = words_.data() + w;
    std::copy(words.begin(), words.end(), out);
    if (rank() != 0) {
      auto send = context_->createUnboundBuffer(out, bytes);
      auto recv = context_->createUnboundBuffer(in, bytes);
      send->send(0, slot);
      recv->recv(0, slot);
      try {
        recv->waitRecv(timeout(deadline));
        send->waitSend(timeout(deadline));
      } catch (const std::exception& e) {
        if (!is_timeout(e)) throw;
        return PeerFailure("rank 0 did not answer within " + seconds_text(deadline - start));
      }
      std::copy(in, in + words.size(), words.begin());
      return Status::OK();
    }
    std::vector<int> remaining;
    for (int r = 1; r < size(); ++r) remaining.push_back(r);
    auto recv = context_->createUnboundBuffer(in, bytes);
    reset_tick();
    bool first = true;
    while (!remaining.empty()) {
      recv->recv(remaining, slot);
      int from = -1;
      bool done = false;
      do {
        set_waiting(recv.get());
        if (std::exchange(first, false)) test_tick_race();
        try {
          done = recv->waitRecv(&from, timeout(deadline));
        } catch (const std::exception& e) {
          set_waiting(nullptr);
          if (!is_timeout(e)) throw;
          return PeerFailure(ranks_string(remaining) + " did not take part within " +
                             seconds_text(deadline - start));
        }
        set_waiting(nullptr);
      } while (!done && take_tick(Clock::now() - start, remaining));
      if (!done) return PeerFailure("the wait for " + ranks_string(remaining) + " was aborted");
      for (std::size_t k = 0; k < w; ++k) out[k] &= in[k];
      remaining.erase(std::remove(remaining.begin(), remaining.end(), from), remaining.end());
    }
    auto send = context_->createUnboundBuffer(out, bytes);
    for (int r = 1; r < size(); ++r) send->send(r, slot);
    for (int r = 1; r < size(); ++r) send->waitSend(timeout(deadline));
    std::copy(out, out + words.size(), words.begin());
    return Status::OK();
  });
}

Status GlooCommunicator::control_gather(const std::string& mine, std::vector<std::string>* all,
                                        Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("control_gather"));
  if (rank() == 0 && all == nullptr) {
    return InvalidArgument(where("control_gather") + ": rank 0 needs a result vector");
  }
  if (all != nullptr) all->clear();
  if (size() == 1) {
    all->push_back(mine);
    return Status::OK();
  }
  const std::uint64_t slot = next_slot(2);
  const auto start = Clock::now();
  return guarded("control_gather", deadline, [&]() -> Status {
    std::uint64_t length = mine.size();
    if (rank() != 0) {
      auto head = context_->createUnboundBuffer(&length, sizeof(length));
      head->send(0, slot);
      std::unique_ptr<UnboundBuffer> body;
      if (length > 0) {
        body = context_->createUnboundBuffer(const_cast<char*>(mine.data()), mine.size());
        body->send(0, slot + 1);
      }
      try {
        head->waitSend(timeout(deadline));
        if (body) body->waitSend(timeout(deadline));
      } catch (const std::exception& e) {
        if (!is_timeout(e)) throw;
        return PeerFailure("rank 0 did not take part within " + seconds_text(deadline - start));
      }
      return Status::OK();
    }
    all->assign(static_cast<std::size_t>(size()), std::string());
    (*all)[0] = mine;
    std::vector<int> remaining;
    for (int r = 1; r < size(); ++r) remaining.push_back(r);
    std::uint64_t got = 0;
    auto head = context_->createUnboundBuffer(&got, sizeof(got));
    std::vector<std::unique_ptr<UnboundBuffer>> bodies;
    reset_tick();
    bool first = true;
    try {
      while (!remaining.empty()) {
        head->recv(remaining, slot);
        int from = -1;
        bool done = false;
        do {
          set_waiting(head.get());
          if (std::exchange(first, false)) test_tick_race();
          done = head->waitRecv(&from, timeout(deadline));
          set_waiting(nullptr);
        } while (!done && take_tick(Clock::now() - start, remaining));
        if (!done) return PeerFailure("the wait for " + ranks_string(remaining) + " was aborted");
        remaining.erase(std::remove(remaining.begin(), remaining.end(), from), remaining.end());
        if (got == 0) continue;
        std::string& text = (*all)[static_cast<std::size_t>(from)];
        text.resize(got);
        bodies.push_back(context_->createUnboundBuffer(text.data(), text.size()));
        bodies.back()->recv(from, slot + 1);
      }
      remaining.clear();
      for (auto& b : bodies) b->waitRecv(timeout(deadline));
    } catch (const std::exception& e) {
      set_waiting(nullptr);
      if (!is_timeout(e)) throw;
      if (remaining.empty()) {
        return PeerFailure("a rank did not send its message within " +
                           seconds_text(deadline - start));
      }
      return PeerFailure(ranks_string(remaining) + " did not take part within " +
                         seconds_text(deadline - start));
    }
    return Status::OK();
  });
}

Status GlooCommunicator::control_broadcast(std::string* message, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("control_broadcast"));
  if (size() == 1) return Status::OK();
  const std::uint64_t slot = next_slot(2);
  const auto start = Clock::now();
  return guarded("control_broadcast", deadline, [&]() -> Status {
    std::uint64_t length = message->size();
    auto head = context_->createUnboundBuffer(&length, sizeof(length));
    if (rank() == 0) {
      std::unique_ptr<UnboundBuffer> body;
      if (length > 0) body = context_->createUnboundBuffer(message->data(), message->size());
      for (int r = 1; r < size(); ++r) {
        head->send(r, slot);
        if (body) body->send(r, slot + 1);
      }
      for (int r = 1; r < size(); ++r) {
        head->waitSend(timeout(deadline));
        if (body) body->waitSend(timeout(deadline));
      }
      return Status::OK();
    }
    try {
      head->recv(0, slot);
      head->waitRecv(timeout(deadline));
      message->resize(length);
      if (length > 0) {
        auto body = context_->createUnboundBuffer(message->data(), message->size());
        body->recv(0, slot + 1);
        body->waitRecv(timeout(deadline));
      }
    } catch (const std::exception& e) {
      if (!is_timeout(e)) throw;
      return PeerFailure("rank 0 did not send within " + seconds_text(deadline - start));
    }
    return Status::OK();
  });
}

}  // namespace kolo::transport::gloo_impl
