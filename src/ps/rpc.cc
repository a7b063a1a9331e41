// RpcServer over ZeroMQ (rpc.h says what it does; wire.h the bytes; the client is
// rpc_client.cc).
//
// Threads. A server has: an I/O thread that owns the ROUTER socket (it receives,
// checks and dispatches requests, and sends replies handed to it through an inproc
// PUSH/PULL pair); a ZAP thread that owns the authentication socket and answers
// libzmq's handshake questions; and a pool of handler threads that grows while all are
// busy, up to max_handler_threads. A client has one I/O thread that owns its DEALER
// socket and the socket monitor; callers hand it requests through an inproc PUSH socket
// (under a mutex) and wait on their own condition variable until the reply or their
// deadline. Every socket is used by one thread at a time; every loop polls with a
// timeout so stop() is prompt; no zmq::error_t leaves a thread.
#include "ps/rpc.h"

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/logging.h"
#include "common/secret.h"
#include "ps/rpc_frames.h"
#include "ps/wire.h"

namespace kolo::ps {
namespace {

using rpc_detail::encode_frames;
using rpc_detail::kHandshakeMs;
using rpc_detail::kPollInterval;

// The ZAP endpoint libzmq asks (one handler per context; each server has its own).
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapDomain = "kolo";
constexpr std::int64_t kMaxDeadlineMs = std::int64_t{7} * 24 * 3600 * 1000;
// How long stop() waits for running handlers before leaving them behind.
constexpr auto kStopWait = std::chrono::seconds(10);
// How long the router may take at close to send the last replies.
constexpr int kCloseLingerMs = 200;

bool is_loopback(const std::string& address) {
  in_addr a4{};
  if (::inet_pton(AF_INET, address.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (::inet_pton(AF_INET6, address.c_str(), &a6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
  }
  return false;
}

std::string frame_text(const zmq::message_t& m) { return std::string(m.data<char>(), m.size()); }

// "10.0.0.3 (/job:worker/replica:0/task:1)", from the properties libzmq attaches.
std::string peer_of(zmq::message_t& m) {
  std::string out = "?";
  try {
    out = m.gets("Peer-Address");
  } catch (const zmq::error_t&) {
  }
  try {
    const char* user = m.gets("User-Id");
    if (user != nullptr && *user != '\0') out += std::string(" (") + user + ")";
  } catch (const zmq::error_t&) {
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Server

struct RpcServer::Impl {
  struct Task {
    zmq::message_t identity;
    std::uint64_t request_id = 0;
    Message request;
    Deadline deadline;
    Handler handler;
  };
  // What the handler threads share with the I/O thread; shared so that a handler still
  // running when stop() gives up on it finds it alive.
  struct Pool {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Task> tasks;
    int threads = 0, idle = 0, running = 0;
    bool stopping = false;
    bool closing = false;  // stop() began: requests that arrive now are not run
    std::vector<std::thread> workers;
    // Replies go to the I/O thread through this socket (used under reply_mu).
    std::mutex reply_mu;
    std::unique_ptr<zmq::socket_t> reply_push;
  };

  explicit Impl(RpcServerOptions o) : options(std::move(o)), pool(std::make_shared<Pool>()) {}

  RpcServerOptions options;
  std::map<std::string, Handler> handlers;  // fixed once started
  zmq::context_t ctx;
  std::unique_ptr<zmq::socket_t> router, reply_pull, zap;
  std::string bound;
  std::thread io_thread, zap_thread;
  std::atomic<bool> stopping{false};
  bool started = false, stopped = false;
  std::shared_ptr<Pool> pool;

  mutable std::mutex stats_mu;
  std::map<std::string, std::uint64_t> bytes_by_method;  // guarded by stats_mu
  std::atomic<std::uint64_t> bytes_total{0}, refused{0};

  void zap_loop();
  void io_loop();
  void on_request(std::vector<zmq::message_t>& frames);
  void answer_error(zmq::message_t& identity, std::uint64_t request_id, const Status& s);
  void dispatch(Task task);
  static void worker_loop(std::shared_ptr<Pool> pool, std::string name);
};

void RpcServer::Impl::zap_loop() {
  try {
    while (!stopping.load()) {
      zmq::pollitem_t item{static_cast<void*>(*zap), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, kPollInterval);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> req;
      if (!zmq::recv_multipart(*zap, std::back_inserter(req))) continue;
      // version, request id, domain, address, routing id, mechanism, credentials...
      if (req.size() < 6) continue;
      const std::string address = frame_text(req[3]);
      const std::string mechanism = frame_text(req[5]);
      std::string user, password;
      if (mechanism == "PLAIN" && req.size() >= 8) {
        user = frame_text(req[6]);
        password = frame_text(req[7]);
      }
      std::string why;
      if (mechanism != "PLAIN") {
        why = "no credentials (mechanism " + mechanism + ")";
      } else if (!same_secret(password, plain_password(options.secret))) {
        why = password == plain_password("") ? "no job secret" : "wrong job secret";
      } else if (options.secret.empty() && !is_loopback(address)) {
        why = "not a loopback peer, and this server has no job secret";
      }
      const bool ok = why.empty();
      if (!ok) {
        refused.fetch_add(1);
        KOLO_LOG(kWarning, "ps") << options.name << " (" << bound << "): refused a connection from "
                                 << address << (user.empty() ? "" : " (" + user + ")") << ": "
                                 << why;
      }
      std::vector<zmq::message_t> reply;
      reply.emplace_back(std::string("1.0"));
      reply.emplace_back(req[1].data(), req[1].size());
      reply.emplace_back(std::string(ok ? "200" : "400"));
      reply.emplace_back(ok ? std::string("OK") : why);
      reply.emplace_back(user);
      reply.emplace_back();
      zmq::send_multipart(*zap, reply);
    }
  } catch (const zmq::error_t& e) {
    if (!stopping.load()) {
      KOLO_LOG(kError, "ps") << options.name << ": ZAP thread: " << e.what();
    }
  }
}

void RpcServer::Impl::answer_error(zmq::message_t& identity, std::uint64_t request_id,
                                   const Status& s) {
  WireHeader h;
  h.kind = WireKind::kReply;
  h.request_id = request_id;
  h.code = s.code();
  h.error = s.message();
  std::vector<zmq::message_t> frames;
  frames.emplace_back(identity.data(), identity.size());
  const std::string header = WireCodec::encode(h, Fields());
  frames.emplace_back(header.data(), header.size());
  zmq::send_multipart(*router, frames, zmq::send_flags::dontwait);
}

void RpcServer::Impl::on_request(std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2) return;  // no identity: nothing to answer
  std::size_t total = 0;
  std::vector<std::string_view> views;
  views.reserve(frames.size() - 1);
  for (std::size_t i = 1; i < frames.size(); ++i) {
    views.emplace_back(frames[i].data<char>(), frames[i].size());
    total += frames[i].size();
  }
  WireHeader h;
  Message m;
  Status s = decode_message(views, options.max_message_bytes, &h, &m);
  if (s.ok() && h.kind != WireKind::kRequest) {
    s = InvalidArgument("rpc message: a reply sent to a server");
  }
  if (!s.ok()) s = InvalidArgument(options.name + ": " + s.message());
  Handler handler;
  if (s.ok()) {
    const auto it = handlers.find(h.method);
    if (it == handlers.end()) {
      s = InvalidArgument(options.name + " has no method '" + h.method +
                          "' (is the caller's kolo the same build as this ps task's?)");
    } else {
      handler = it->second;
    }
  }
  if (!s.ok()) {
    refused.fetch_add(1);
    const std::string peer = peer_of(frames[1]);
    KOLO_LOG(kWarning, "ps") << options.name << " (" << bound << "): refused a request of " << total
                             << " bytes from " << peer << ": " << s.message();
    // Answer when the request id can be read (the header's first 16 bytes are its fixed
    // start); a frame too broken for that is dropped.
    std::uint32_t magic = 0;
    if (views[0].size() >= 16 && (std::memcpy(&magic, views[0].data(), 4), magic == kWireMagic)) {
      std::uint64_t id = 0;
      std::memcpy(&id, views[0].data() + 8, 8);
      answer_error(frames[0], id, s);
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    bytes_by_method[h.method] += total;
  }
  bytes_total.fetch_add(total);
  // The handler gets a little less than the caller has left, so that its error (a pull
  // that waited in vain) reaches the caller before the caller gives up.
  // (At most a week: a caller's Deadline::max() must not overflow the clock here.)
  const auto left =
      std::chrono::milliseconds(std::clamp<std::int64_t>(h.deadline_ms, 0, kMaxDeadlineMs));
  const auto margin = std::min<Clock::duration>(left / 4, std::chrono::milliseconds(100));
  Task task{std::move(frames[0]), h.request_id, std::move(m), Clock::now() + left - margin,
            std::move(handler)};
  dispatch(std::move(task));
}

void RpcServer::Impl::dispatch(Task task) {
  std::lock_guard<std::mutex> lock(pool->mu);
  if (pool->closing) return;  // the caller's deadline answers it: this server is going away
  pool->tasks.push_back(std::move(task));
  // One thread per queued request that no idle thread will take (a burst of requests
  // arrives before the first thread wakes).
  if (pool->tasks.size() > static_cast<std::size_t>(pool->idle) &&
      pool->threads < std::max(1, options.max_handler_threads)) {
    ++pool->threads;
    ++pool->idle;
    pool->workers.emplace_back(worker_loop, pool, options.name);
  }
  pool->cv.notify_one();
}

void RpcServer::Impl::worker_loop(std::shared_ptr<Pool> pool, std::string name) {
  std::unique_lock<std::mutex> lock(pool->mu);
  while (true) {
    pool->cv.wait(lock, [&] { return pool->stopping || !pool->tasks.empty(); });
    if (pool->stopping) break;
    Task task = std::move(pool->tasks.front());
    pool->tasks.pop_front();
    --pool->idle;
    ++pool->running;
    lock.unlock();
    Message reply;
    Status s;
    if (Clock::now() >= task.deadline) {
      s = PeerFailure(name + ": the request '" + task.request.method +
                      "' waited past its deadline for a handler thread");
    } else {
      try {
        s = task.handler(task.request, &reply, task.deadline);
      } catch (const std::exception& e) {
        s = Internal(name + ": the handler of '" + task.request.method + "' threw: " + e.what());
      }
    }
    WireHeader h;
    h.kind = WireKind::kReply;
    h.request_id = task.request_id;
    h.code = s.code();
    h.error = s.message();
    if (!s.ok()) reply = Message();
    h.num_blobs = static_cast<std::uint32_t>(reply.blobs.size());
    try {
      std::vector<zmq::message_t> frames = encode_frames(h, reply);
      frames.insert(frames.begin(), std::move(task.identity));
      std::lock_guard<std::mutex> rl(pool->reply_mu);
      if (pool->reply_push && !zmq::send_multipart(*pool->reply_push, frames)) {
        KOLO_LOG(kError, "ps") << name << ": the I/O thread took no reply for "
                               << rpc_detail::kHandOverMs << " ms; dropped the reply to '"
                               << task.request.method << "'";
      }
    } catch (const zmq::error_t& e) {
      KOLO_LOG(kError, "ps") << name << ": could not hand a reply to the I/O thread: " << e.what();
    }
    lock.lock();
    --pool->running;
    ++pool->idle;
    pool->cv.notify_all();
  }
}

void RpcServer::Impl::io_loop() {
  try {
    while (!stopping.load()) {
      zmq::pollitem_t items[] = {{static_cast<void*>(*router), 0, ZMQ_POLLIN, 0},
                                 {static_cast<void*>(*reply_pull), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, kPollInterval);
      if (items[0].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> frames;
        while (
            zmq::recv_multipart(*router, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          on_request(frames);
          frames.clear();
        }
      }
      if (items[1].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> frames;
        while (zmq::recv_multipart(*reply_pull, std::back_inserter(frames),
                                   zmq::recv_flags::dontwait)) {
          // A caller that went away: ROUTER drops what it cannot route.
          zmq::send_multipart(*router, frames, zmq::send_flags::dontwait);
          frames.clear();
        }
      }
    }
    // stop(): the replies the handlers handed over before they all finished go out (the
    // router lingers to send them), so a caller whose request ran is answered: a "stop"
    // whose reply was dropped here once held the chief's exit for its 3 s bound.
    std::vector<zmq::message_t> frames;
    while (
        zmq::recv_multipart(*reply_pull, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      zmq::send_multipart(*router, frames, zmq::send_flags::dontwait);
      frames.clear();
    }
  } catch (const zmq::error_t& e) {
    if (!stopping.load()) {
      KOLO_LOG(kError, "ps") << options.name << ": I/O thread: " << e.what();
    }
  }
}

RpcServer::RpcServer(RpcServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
RpcServer::~RpcServer() { stop(); }

void RpcServer::handle(const std::string& method, Handler handler) {
  impl_->handlers[method] = std::move(handler);
}

Status RpcServer::start() {
  Impl& d = *impl_;
  if (d.started) return InvalidArgument(d.options.name + ": the rpc server was already started");
  try {
    d.zap = std::make_unique<zmq::socket_t>(d.ctx, zmq::socket_type::rep);
    d.zap->set(zmq::sockopt::linger, 0);
    d.zap->bind(kZapEndpoint);
    d.reply_pull = std::make_unique<zmq::socket_t>(d.ctx, zmq::socket_type::pull);
    d.reply_pull->set(zmq::sockopt::linger, 0);
    d.reply_pull->bind("inproc://kolo-ps-replies");
    d.pool->reply_push = std::make_unique<zmq::socket_t>(d.ctx, zmq::socket_type::push);
    d.pool->reply_push->set(zmq::sockopt::linger, 0);
    d.pool->reply_push->set(zmq::sockopt::sndtimeo, rpc_detail::kHandOverMs);
    d.pool->reply_push->connect("inproc://kolo-ps-replies");
    d.router = std::make_unique<zmq::socket_t>(d.ctx, zmq::socket_type::router);
    // The last replies (stop()'s drain) get this long to leave at close.
    d.router->set(zmq::sockopt::linger, kCloseLingerMs);
    d.router->set(zmq::sockopt::plain_server, 1);
    d.router->set(zmq::sockopt::zap_domain, kZapDomain);
    d.router->set(zmq::sockopt::handshake_ivl, kHandshakeMs);
    d.router->set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(d.options.max_message_bytes));
    // ":0" is how kolo spells "any free port"; ZeroMQ spells it ":*".
    std::string ep = d.options.endpoint;
    if (ep.size() > 2 && ep.compare(ep.size() - 2, 2, ":0") == 0) ep.replace(ep.size() - 1, 1, "*");
    try {
      d.router->bind(ep);
    } catch (const zmq::error_t& e) {
      const std::string why =
          e.num() == EADDRINUSE ? "another process listens on it" : std::string(e.what());
      d.router.reset();
      d.pool->reply_push.reset();
      d.reply_pull.reset();
      d.zap.reset();
      return InvalidArgument(d.options.name + ": cannot listen on " + d.options.endpoint + ": " +
                             why + " (choose another port in the cluster spec)");
    }
    d.bound = d.router->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Internal(d.options.name + ": could not set up the rpc server: " + e.what());
  }
  if (d.options.secret.empty()) {
    KOLO_LOG(kWarning, "ps") << d.options.name << " (" << d.bound
                             << ") has no job secret: it accepts only loopback peers, and any "
                                "local user's process could call it (set KOLO_RENDEZVOUS_SECRET)";
  }
  d.started = true;
  d.zap_thread = std::thread([&d] { d.zap_loop(); });
  d.io_thread = std::thread([&d] { d.io_loop(); });
  return Status::OK();
}

std::string RpcServer::endpoint() const { return impl_->bound; }
const std::string& RpcServer::name() const { return impl_->options.name; }

void RpcServer::stop() {
  Impl& d = *impl_;
  if (!d.started || d.stopped) return;
  d.stopped = true;
  std::vector<std::thread> workers;
  {
    std::unique_lock<std::mutex> lock(d.pool->mu);
    // Running handlers finish (their waits have deadlines) while the I/O thread still
    // sends their replies; queued ones and new arrivals are dropped.
    d.pool->closing = true;
    d.pool->tasks.clear();
    if (!d.pool->cv.wait_for(lock, kStopWait, [&] { return d.pool->running == 0; })) {
      KOLO_LOG(kError, "ps") << d.options.name << ": " << d.pool->running
                             << " handler(s) still running after "
                             << std::chrono::duration<double>(kStopWait).count()
                             << " s; leaving them behind";
    }
  }
  d.stopping.store(true);
  if (d.io_thread.joinable()) d.io_thread.join();  // after its last replies (io_loop)
  if (d.zap_thread.joinable()) d.zap_thread.join();
  {
    std::lock_guard<std::mutex> lock(d.pool->mu);
    d.pool->stopping = true;
    d.pool->cv.notify_all();
    workers.swap(d.pool->workers);
  }
  const bool all_done = [&] {
    std::lock_guard<std::mutex> lock(d.pool->mu);
    return d.pool->running == 0;
  }();
  for (auto& t : workers) {
    if (all_done) {
      t.join();
    } else {
      t.detach();  // it holds the pool alive and sends nothing once reply_push is gone
    }
  }
  try {
    {
      std::lock_guard<std::mutex> rl(d.pool->reply_mu);
      d.pool->reply_push.reset();
    }
    d.router.reset();
    d.reply_pull.reset();
    d.zap.reset();
    d.ctx.close();
  } catch (const zmq::error_t& e) {
    KOLO_LOG(kError, "ps") << d.options.name << ": closing the rpc server: " << e.what();
  }
}

std::uint64_t RpcServer::bytes_received(const std::string& method) const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  const auto it = impl_->bytes_by_method.find(method);
  return it == impl_->bytes_by_method.end() ? 0 : it->second;
}
std::uint64_t RpcServer::bytes_received() const { return impl_->bytes_total.load(); }
std::uint64_t RpcServer::refused() const { return impl_->refused.load(); }

}  // namespace kolo::ps
