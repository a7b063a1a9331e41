// RpcServer and RpcClient over real ZeroMQ sockets on loopback: calls, secrets,
// deadlines, concurrency, and hostile input on a raw socket.
#include "ps/rpc.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "ps/wire.h"

namespace kolo::ps {
namespace {

using std::chrono::milliseconds;

Status echo(const Message& req, Message* reply, Deadline) {
  std::int64_t n = 0;
  KOLO_RETURN_IF_ERROR(req.fields.get("n", &n));
  reply->fields.set("n", n + 1);
  reply->blobs = req.blobs;
  return Status::OK();
}

struct Served {
  explicit Served(std::string secret = "s3cret", std::size_t max_bytes = std::size_t{1} << 30)
      : server({.endpoint = "tcp://127.0.0.1:0",
                .secret = secret,
                .name = "/job:ps/replica:0/task:0",
                .max_message_bytes = max_bytes}) {
    server.handle("echo", echo);
    server.handle("sleep", [this](const Message&, Message*, Deadline) {
      std::this_thread::sleep_for(milliseconds(sleep_ms.load()));
      return Status::OK();
    });
    server.handle("fail", [](const Message&, Message*, Deadline) {
      return Mismatch("variable 'w' does not match");
    });
    EXPECT_TRUE(server.start().ok());
  }
  RpcClientOptions client_options(std::string secret = "s3cret") {
    return {.endpoint = server.endpoint(),
            .secret = secret,
            .peer = "/job:ps/replica:0/task:0",
            .self = "/job:worker/replica:0/task:0"};
  }
  std::atomic<int> sleep_ms{0};
  RpcServer server;
};

Status call_echo(RpcClient& c, std::int64_t n, Message* reply, double seconds = 10) {
  Message req{"echo"};
  req.fields.set("n", n);
  req.blobs = {std::string(100, 'x'), std::string("tail")};
  return c.call(req, reply, deadline_after(seconds));
}

TEST(RpcTest, CallsAndRepliesWithFieldsAndBlobs) {
  Served s;
  RpcClient c(s.client_options());
  Message reply;
  ASSERT_TRUE(call_echo(c, 41, &reply).ok());
  std::int64_t n = 0;
  ASSERT_TRUE(reply.fields.get("n", &n).ok());
  EXPECT_EQ(n, 42);
  ASSERT_EQ(reply.blobs.size(), 2u);
  EXPECT_EQ(reply.blobs[1], "tail");
  EXPECT_EQ(s.server.bytes_received("echo"), c.bytes_sent());
  EXPECT_EQ(s.server.bytes_received(), c.bytes_sent());
  EXPECT_EQ(s.server.refused(), 0u);
}

// A "stop" request: its handler makes the serving thread stop the server at once, as a ps
// task's and a worker's serve loop do. The caller must still get the reply (it used to be
// dropped about half the time, and the chief then waited out its 3 s bound).
TEST(RpcTest, TheReplyOfARequestThatStopsTheServerReachesTheCaller) {
  for (int i = 0; i < 10; ++i) {
    RpcServer server(
        {.endpoint = "tcp://127.0.0.1:0", .secret = "s", .name = "/job:ps/replica:0/task:0"});
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    server.handle("stop", [&](const Message&, Message*, Deadline) {
      {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
      }
      cv.notify_all();
      // The handler's thread is descheduled here while the serving thread stops the
      // server (on a loaded machine it was, about half the time).
      std::this_thread::sleep_for(std::chrono::milliseconds(i % 2 == 0 ? 50 : 0));
      return Status::OK();
    });
    ASSERT_TRUE(server.start().ok());
    std::thread serving([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::seconds(10), [&] { return stop; });
      lock.unlock();
      server.stop();
    });
    RpcClient c({.endpoint = server.endpoint(),
                 .secret = "s",
                 .peer = "/job:ps/replica:0/task:0",
                 .self = "/job:chief/replica:0/task:0"});
    Message req{"stop"}, reply;
    const Status st = c.call(req, &reply, deadline_after(2));
    serving.join();
    ASSERT_TRUE(st.ok()) << "try " << i << ": " << st.to_string();
  }
}

TEST(RpcTest, HandlerErrorsReachTheCallerAsTheyAre) {
  Served s;
  RpcClient c(s.client_options());
  Message req{"fail"}, reply;
  const Status st = c.call(req, &reply, deadline_after(10));
  EXPECT_EQ(st.code(), ErrorCode::kMismatch);
  EXPECT_EQ(st.message(), "variable 'w' does not match");
  // A handler's own InvalidArgument (a missing field) too.
  Message bad{"echo"};
  const Status st2 = c.call(bad, &reply, deadline_after(10));
  EXPECT_EQ(st2.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st2.message().find("'n'"), std::string::npos);
}

TEST(RpcTest, UnknownMethodIsRefusedAndCounted) {
  Served s;
  RpcClient c(s.client_options());
  Message req{"no.such"}, reply;
  const Status st = c.call(req, &reply, deadline_after(10));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no method 'no.such'"), std::string::npos) << st.message();
  EXPECT_EQ(s.server.refused(), 1u);
  ASSERT_TRUE(call_echo(c, 1, &reply).ok());
}

TEST(RpcTest, WrongOrMissingSecretIsRefusedAndSaidSo) {
  Served s;
  for (const std::string secret : {"wrong!", ""}) {
    RpcClient c(s.client_options(secret));
    Message reply;
    const auto start = Clock::now();
    const Status st = call_echo(c, 1, &reply, 20);
    EXPECT_EQ(st.code(), ErrorCode::kPeerFailure);
    EXPECT_NE(st.message().find("refused this process: wrong job secret"), std::string::npos)
        << st.message();
    // Not a timeout: the handshake failure is reported as soon as it happens.
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  }
  EXPECT_GE(s.server.refused(), 2u);
  RpcClient good(s.client_options());
  Message reply;
  EXPECT_TRUE(call_echo(good, 1, &reply).ok());
}

TEST(RpcTest, NoSecretAcceptsLoopbackOnly) {
  Served s("");
  RpcClient c(s.client_options(""));
  Message reply;
  EXPECT_TRUE(call_echo(c, 1, &reply).ok());
  // A caller with a secret is refused by a server without one (the job's processes
  // disagree about the secret).
  RpcClient other(s.client_options("s3cret"));
  EXPECT_EQ(call_echo(other, 1, &reply, 20).code(), ErrorCode::kPeerFailure);
}

TEST(RpcTest, NoSecretRefusesANonLoopbackPeer) {
  // Listen on every address and call through this host's non-loopback address, if any.
  RpcServer server({.endpoint = "tcp://0.0.0.0:0", .secret = "", .name = "ps0"});
  server.handle("echo", echo);
  ASSERT_TRUE(server.start().ok());
  const std::string port = server.endpoint().substr(server.endpoint().rfind(':') + 1);
  std::string host;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* a = ifs; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
      char buf[64];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      if (std::string(buf).rfind("127.", 0) != 0) host = buf;
    }
    freeifaddrs(ifs);
  }
  if (host.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  RpcClient c({.endpoint = "tcp://" + host + ":" + port, .secret = "", .peer = "ps0", .self = "w"});
  Message reply;
  const Status st = call_echo(c, 1, &reply, 20);
  EXPECT_EQ(st.code(), ErrorCode::kPeerFailure) << st.message();
  EXPECT_NE(st.message().find("refused this process"), std::string::npos) << st.message();
  EXPECT_GE(server.refused(), 1u);
}

TEST(RpcTest, DeadlinePassesLateReplyIsDroppedNextCallWorks) {
  Served s;
  RpcClient c(s.client_options());
  s.sleep_ms = 1500;
  Message req{"sleep"}, reply;
  const auto start = Clock::now();
  const Status st = c.call(req, &reply, deadline_after(0.3));
  const auto took = Clock::now() - start;
  EXPECT_EQ(st.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(st.message().find("/job:ps/replica:0/task:0 at " + s.server.endpoint() +
                              " did not answer 'sleep' within 0."),  // 0.3 s, or a bit more
            std::string::npos)
      << st.message();
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(1400));
  // The next call works while the late reply is still to come, and after it came.
  ASSERT_TRUE(call_echo(c, 5, &reply).ok());
  std::this_thread::sleep_for(milliseconds(1500));
  ASSERT_TRUE(call_echo(c, 6, &reply).ok());
  std::int64_t n = 0;
  ASSERT_TRUE(reply.fields.get("n", &n).ok());
  EXPECT_EQ(n, 7);
}

TEST(RpcTest, AnUnboundedDeadlineWorks) {
  Served s;
  RpcClient c(s.client_options());
  Message req{"echo"}, reply;
  req.fields.set("n", std::int64_t{1});
  EXPECT_TRUE(c.call(req, &reply, Deadline::max()).ok());
}

TEST(RpcTest, NobodyListeningFailsAtTheDeadline) {
  RpcClient c({.endpoint = "tcp://127.0.0.1:1",
               .secret = "x",
               .peer = "/job:ps/replica:0/task:3",
               .self = "w"});
  Message reply;
  const auto start = Clock::now();
  const Status st = call_echo(c, 1, &reply, 0.2);
  EXPECT_EQ(st.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(st.message().find("/job:ps/replica:0/task:3"), std::string::npos);
  EXPECT_LT(Clock::now() - start, milliseconds(800));
}

TEST(RpcTest, PortTakenIsAClearError) {
  Served s;
  RpcServer again({.endpoint = s.server.endpoint(), .secret = "x", .name = "ps1"});
  const Status st = again.start();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("another process listens on it"), std::string::npos) << st.message();
}

TEST(RpcTest, ManyThreadsShareOneClient) {
  Served s;
  RpcClient c(s.client_options());
  constexpr int kThreads = 16, kCalls = 200;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        Message reply;
        const std::int64_t n = t * 100000 + i;
        std::int64_t got = 0;
        if (call_echo(c, n, &reply).ok() && reply.fields.get("n", &got).ok() && got == n + 1) {
          ++good;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), kThreads * kCalls);
}

TEST(RpcTest, HandlersRunInParallel) {
  // Each handler waits (bounded) until all 8 are running at once: they can only all
  // succeed if the pool runs them in parallel.
  RpcServer server({.endpoint = "tcp://127.0.0.1:0", .secret = "s", .name = "ps0"});
  std::atomic<int> running{0};
  server.handle("gather", [&](const Message&, Message*, Deadline deadline) {
    ++running;
    while (running.load() < 8 && Clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(1));
    return running.load() >= 8 ? Status::OK() : Internal("only " + std::to_string(running.load()));
  });
  ASSERT_TRUE(server.start().ok());
  RpcClient c({.endpoint = server.endpoint(), .secret = "s", .peer = "ps0", .self = "w"});
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      Message req{"gather"}, reply;
      if (c.call(req, &reply, deadline_after(20)).ok()) ++good;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 8);
}

TEST(RpcTest, HandlerPoolIsBounded) {
  RpcServer server(
      {.endpoint = "tcp://127.0.0.1:0", .secret = "s", .name = "ps0", .max_handler_threads = 2});
  std::atomic<int> running{0}, peak{0};
  server.handle("work", [&](const Message&, Message*, Deadline) {
    const int now = ++running;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(milliseconds(50));
    --running;
    return Status::OK();
  });
  ASSERT_TRUE(server.start().ok());
  RpcClient c({.endpoint = server.endpoint(), .secret = "s", .peer = "ps0", .self = "w"});
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      Message req{"work"}, reply;
      if (c.call(req, &reply, deadline_after(20)).ok()) ++good;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 6);
  EXPECT_LE(peak.load(), 2);
}

// A process that knows the secret but sends garbage on a raw DEALER socket: every frame
// is refused and counted, the server keeps answering real calls.
TEST(RpcTest, ServerKeepsServingAfterHostileInput) {
  Served s("s3cret", 1 << 20);
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.set(zmq::sockopt::plain_username, "mallory");
  raw.set(zmq::sockopt::plain_password, plain_password("s3cret"));
  raw.set(zmq::sockopt::rcvtimeo, 20000);
  raw.connect(s.server.endpoint());
  std::mt19937_64 rng(7);
  WireHeader h;
  h.request_id = 77;
  h.deadline_ms = 1000;
  h.method = "echo";
  const std::string good = WireCodec::encode(h, Fields());
  int sent = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<zmq::message_t> frames;
    std::string f = good;
    switch (i % 5) {
      case 0:
        f.resize(rng() % 30);
        break;  // cut
      case 1:
        f[rng() % f.size()] ^= static_cast<char>(1 + rng() % 255);
        break;  // flip
      case 2:
        f = std::string(rng() % 64, static_cast<char>(rng()));
        break;  // noise
      case 3:
        frames.emplace_back(good.data(), good.size());
        break;   // extra blob
      case 4: {  // blob count says 1, none sent
        WireHeader h1 = h;
        h1.num_blobs = 1;
        f = WireCodec::encode(h1, Fields());
        break;
      }
    }
    frames.insert(frames.begin(), zmq::message_t(f.data(), f.size()));
    zmq::send_multipart(raw, frames);
    ++sent;
  }
  // Requests whose id could be read are answered with kInvalidArgument: read one.
  std::vector<zmq::message_t> answer;
  ASSERT_TRUE(zmq::recv_multipart(raw, std::back_inserter(answer)));
  WireHeader ah;
  Fields af;
  ASSERT_TRUE(
      WireCodec::decode(std::string_view(answer[0].data<char>(), answer[0].size()), &ah, &af).ok());
  EXPECT_EQ(ah.kind, WireKind::kReply);
  EXPECT_EQ(ah.code, ErrorCode::kInvalidArgument);
  // Oversized: over max_message_bytes (1 MiB) in blobs.
  {
    WireHeader h2 = h;
    h2.num_blobs = 2;
    const std::string header = WireCodec::encode(h2, Fields());
    const std::string half(600 << 10, 'z');
    std::vector<zmq::message_t> frames;
    frames.emplace_back(header.data(), header.size());
    frames.emplace_back(half.data(), half.size());
    frames.emplace_back(half.data(), half.size());
    zmq::send_multipart(raw, frames);
  }
  RpcClient c(s.client_options());
  Message reply;
  // The server is still up; wait for it to have seen everything.
  for (int i = 0; i < 100 && s.server.refused() < 120; ++i)
    std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(call_echo(c, 1, &reply).ok());
  EXPECT_GE(s.server.refused(), 120u);  // everything but the flips that kept it valid
  EXPECT_LE(s.server.refused(), static_cast<std::uint64_t>(sent + 1));
}

}  // namespace
}  // namespace kolo::ps
