// RpcClient over ZeroMQ (rpc.h says what it does; threads: rpc.cc's header comment).
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/format.h"
#include "common/logging.h"
#include "ps/rpc.h"
#include "ps/rpc_frames.h"
#include "ps/wire.h"

namespace kolo::ps {
namespace {

using rpc_detail::encode_frames;
using rpc_detail::kHandshakeMs;
using rpc_detail::kPollInterval;

std::string seconds_text(Clock::duration d) {
  return number_string(std::round(std::chrono::duration<double>(d).count() * 10) / 10);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Client

struct RpcClient::Impl {
  struct Pending {
    std::condition_variable cv;
    bool done = false;
    Status status;
    Message reply;
  };

  explicit Impl(RpcClientOptions o) : options(std::move(o)) {}

  RpcClientOptions options;
  zmq::context_t ctx;
  std::thread io_thread;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> bytes_sent{0};
  Status setup_error;  // set in the constructor; every call returns it

  std::mutex send_mu;
  std::unique_ptr<zmq::socket_t> push;  // guarded by send_mu

  std::mutex mu;
  std::map<std::uint64_t, Pending*> pending;  // guarded by mu
  std::uint64_t next_id = 1;                  // guarded by mu
  std::string refused_why;                    // guarded by mu: non-empty after an auth failure

  // Owned by the I/O thread after the constructor.
  std::unique_ptr<zmq::socket_t> dealer, pull, monitor;

  void io_loop();
  void on_reply(std::vector<zmq::message_t>& frames);
  void on_monitor_event(std::vector<zmq::message_t>& frames);
  std::string refused_text() const {
    return "the task " + options.peer + " at " + options.endpoint +
           " refused this process: wrong job secret; every process of the job must have the "
           "job's secret (KOLO_RENDEZVOUS_SECRET, which kolorun sets for its workers)";
  }
};

void RpcClient::Impl::on_reply(std::vector<zmq::message_t>& frames) {
  std::vector<std::string_view> views;
  for (auto& f : frames) views.emplace_back(f.data<char>(), f.size());
  WireHeader h;
  Message m;
  // Replies are limited only by what a server may send back (pulls of large shards).
  const Status s = decode_message(views, std::numeric_limits<std::size_t>::max(), &h, &m);
  if (!s.ok() || h.kind != WireKind::kReply) {
    KOLO_LOG(kWarning, "ps") << options.self << ": dropped a malformed reply from " << options.peer
                             << " at " << options.endpoint << ": "
                             << (s.ok() ? std::string("not a reply") : s.message());
    return;
  }
  std::lock_guard<std::mutex> lock(mu);
  const auto it = pending.find(h.request_id);
  if (it == pending.end()) {
    KOLO_LOG(kDebug, "ps") << options.self << ": dropped a late reply (request " << h.request_id
                           << ") from " << options.peer;
    return;
  }
  Pending* p = it->second;
  p->status = h.code == ErrorCode::kOk ? Status::OK() : Status(h.code, h.error);
  p->reply = std::move(m);
  p->done = true;
  p->cv.notify_one();
}

void RpcClient::Impl::on_monitor_event(std::vector<zmq::message_t>& frames) {
  if (frames.empty() || frames[0].size() < 6) return;
  std::uint16_t event = 0;
  std::uint32_t value = 0;
  std::memcpy(&event, frames[0].data(), 2);
  std::memcpy(&value, frames[0].data<char>() + 2, 4);
  std::lock_guard<std::mutex> lock(mu);
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    const bool first = refused_why.empty();
    refused_why = refused_text();
    if (first) {
      KOLO_LOG(kWarning, "ps") << options.self << ": " << refused_why;
    }
    for (auto& [id, p] : pending) p->cv.notify_one();
  } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
    refused_why.clear();
  }
}

void RpcClient::Impl::io_loop() {
  try {
    while (!stopping.load()) {
      zmq::pollitem_t items[] = {{static_cast<void*>(*dealer), 0, ZMQ_POLLIN, 0},
                                 {static_cast<void*>(*pull), 0, ZMQ_POLLIN, 0},
                                 {static_cast<void*>(*monitor), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 3, kPollInterval);
      std::vector<zmq::message_t> frames;
      if (items[0].revents & ZMQ_POLLIN) {
        while (
            zmq::recv_multipart(*dealer, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          on_reply(frames);
          frames.clear();
        }
      }
      if (items[1].revents & ZMQ_POLLIN) {
        while (zmq::recv_multipart(*pull, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          // DEALER queues while the server is unreachable (up to its high-water mark);
          // a request it cannot queue fails its caller by the deadline.
          zmq::send_multipart(*dealer, frames, zmq::send_flags::dontwait);
          frames.clear();
        }
      }
      if (items[2].revents & ZMQ_POLLIN) {
        while (
            zmq::recv_multipart(*monitor, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          on_monitor_event(frames);
          frames.clear();
        }
      }
    }
  } catch (const zmq::error_t& e) {
    if (!stopping.load()) {
      KOLO_LOG(kError, "ps") << options.self << ": rpc client of " << options.peer
                             << ": I/O thread: " << e.what();
    }
  }
  try {
    if (dealer) zmq_socket_monitor(static_cast<void*>(*dealer), nullptr, 0);
    monitor.reset();
    dealer.reset();
    pull.reset();
  } catch (const zmq::error_t&) {
  }
}

RpcClient::RpcClient(RpcClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& d = *impl_;
  try {
    d.pull = std::make_unique<zmq::socket_t>(d.ctx, zmq::socket_type::pull);
    d.pull->set(zmq::sockopt::linger, 0);
    d.pull->bind("inproc://kolo-ps-requests");
    d.push = std::make_unique<zmq::socket_t>(d.ctx, zmq::socket_type::push);
    d.push->set(zmq::sockopt::linger, 0);
    d.push->set(zmq::sockopt::sndtimeo, rpc_detail::kHandOverMs);
    d.push->connect("inproc://kolo-ps-requests");
    d.dealer = std::make_unique<zmq::socket_t>(d.ctx, zmq::socket_type::dealer);
    d.dealer->set(zmq::sockopt::linger, 0);
    d.dealer->set(zmq::sockopt::plain_username, d.options.self.empty() ? "?" : d.options.self);
    d.dealer->set(zmq::sockopt::plain_password, plain_password(d.options.secret));
    d.dealer->set(zmq::sockopt::handshake_ivl, kHandshakeMs);
    if (zmq_socket_monitor(static_cast<void*>(*d.dealer), "inproc://kolo-ps-monitor",
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0) {
      throw zmq::error_t();
    }
    d.monitor = std::make_unique<zmq::socket_t>(d.ctx, zmq::socket_type::pair);
    d.monitor->set(zmq::sockopt::linger, 0);
    d.monitor->connect("inproc://kolo-ps-monitor");
    d.dealer->connect(d.options.endpoint);
  } catch (const zmq::error_t& e) {
    d.setup_error = InvalidArgument("cannot connect to the task " + d.options.peer + " at '" +
                                    d.options.endpoint + "': " + e.what() +
                                    " (an endpoint is tcp://HOST:PORT)");
    d.monitor.reset();
    d.dealer.reset();
    return;
  }
  d.io_thread = std::thread([&d] { d.io_loop(); });
}

RpcClient::~RpcClient() {
  Impl& d = *impl_;
  d.stopping.store(true);
  if (d.io_thread.joinable()) d.io_thread.join();
  try {
    {
      std::lock_guard<std::mutex> lock(d.send_mu);
      d.push.reset();
    }
    d.monitor.reset();
    d.dealer.reset();
    d.pull.reset();
    d.ctx.close();
  } catch (const zmq::error_t&) {
  }
}

Status RpcClient::call(const Message& request, Message* reply, Deadline deadline) {
  Impl& d = *impl_;
  if (!d.setup_error.ok()) return d.setup_error;
  const Deadline start = Clock::now();
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - start);
  if (deadline <= start) {
    return PeerFailure("the call '" + request.method + "' to the task " + d.options.peer +
                       " had no time left (its deadline had passed)");
  }
  Impl::Pending p;
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (!d.refused_why.empty()) return PeerFailure(d.refused_why);
    id = d.next_id++;
    d.pending[id] = &p;
  }
  WireHeader h;
  h.kind = WireKind::kRequest;
  h.request_id = id;
  h.deadline_ms = left.count();
  h.method = request.method;
  h.num_blobs = static_cast<std::uint32_t>(request.blobs.size());
  Status sent = Status::OK();
  try {
    std::vector<zmq::message_t> frames = encode_frames(h, request);
    std::size_t n = 0;
    for (const auto& f : frames) n += f.size();
    std::lock_guard<std::mutex> lock(d.send_mu);
    if (zmq::send_multipart(*d.push, frames)) {
      d.bytes_sent.fetch_add(n);
    } else {
      sent =
          Internal("could not hand '" + request.method + "' to the I/O thread of the client of " +
                   d.options.peer + " within " + std::to_string(rpc_detail::kHandOverMs) + " ms");
    }
  } catch (const zmq::error_t& e) {
    sent = Internal("could not send '" + request.method + "' to the task " + d.options.peer + ": " +
                    e.what());
  }
  std::unique_lock<std::mutex> lock(d.mu);
  if (sent.ok()) {
    p.cv.wait_until(lock, deadline, [&] { return p.done || !d.refused_why.empty(); });
  }
  d.pending.erase(id);
  if (!sent.ok()) return sent;
  if (p.done) {
    if (p.status.ok()) *reply = std::move(p.reply);
    return p.status;
  }
  if (!d.refused_why.empty()) return PeerFailure(d.refused_why);
  return PeerFailure("the task " + d.options.peer + " at " + d.options.endpoint +
                     " did not answer '" + request.method + "' within " +
                     seconds_text(Clock::now() - start) + " s (is it running?" +
                     (d.options.peer.find("/job:ps/") != std::string::npos
                          ? " a ps task that died must be restarted, and the job with it)"
                          : ")"));
}

std::uint64_t RpcClient::bytes_sent() const { return impl_->bytes_sent.load(); }
const RpcClientOptions& RpcClient::options() const { return impl_->options; }

}  // namespace kolo::ps
