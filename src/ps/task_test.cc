// The task lifetimes of task.h over real ZeroMQ sockets on loopback: a task serves until
// the chief says stop, and stops serving with an error naming the chief when the chief
// never comes or goes silent; the chief's heartbeat tells a task that went silent.
#include "ps/task.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

namespace kolo::ps {
namespace {

constexpr const char* kSecret = "s3cret";

RpcServerOptions task_server_options() {
  return {.endpoint = "tcp://127.0.0.1:0", .secret = kSecret, .name = "/job:ps/replica:0/task:0"};
}

// Serves `server` on a thread of its own until stopped; `endpoint` gets the bound address
// once it serves (read on the serving thread: the server is not for two threads).
std::thread serve_in_background(RpcServer& server, StopSignal& stop, const ServeOptions& options,
                                Status* served, std::future<std::string>* endpoint) {
  auto promise = std::make_shared<std::promise<std::string>>();
  *endpoint = promise->get_future();
  return std::thread([&server, &stop, options, served, promise] {
    bool first = true;
    *served = serve_until_stopped(server, options, [&](Deadline d) {
      if (first) promise->set_value(server.endpoint());
      first = false;
      return stop.wait_until(d);
    });
  });
}

ServeOptions serve_options(double start_s, double peer_s) {
  ServeOptions o;
  o.self = "/job:ps/replica:0/task:0";
  o.chief = "/job:chief/replica:0/task:0";
  o.start_timeout_seconds = start_s;
  o.peer_timeout_seconds = peer_s;
  return o;
}

TEST(TaskTest, ATaskWhoseChiefNeverComesStopsServingNamingIt) {
  RpcServer server(task_server_options());
  StopSignal stop(server);
  const auto start = Clock::now();
  Status s = serve_until_stopped(server, serve_options(0.3, 60),
                                 [&](Deadline d) { return stop.wait_until(d); });
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("the chief /job:chief/replica:0/task:0 never came"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("KOLO_START_TIMEOUT_SECONDS"), std::string::npos) << s.message();
  // Asked once a second: the bound is seen at the first look after it.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  server.stop();
}

TEST(TaskTest, TheChiefsHeartbeatKeepsATaskServingUntilItIsToldToStop) {
  RpcServer server(task_server_options());
  StopSignal stop(server);
  Status served(ErrorCode::kInternal, "not run");
  std::future<std::string> endpoint;
  // A start bound long enough for the first beat, a peer bound shorter than the wait below:
  // only the beats keep the task serving.
  std::thread task = serve_in_background(server, stop, serve_options(30, 2.5), &served, &endpoint);
  const std::vector<TaskAddress> tasks = {{endpoint.get(), "/job:ps/replica:0/task:0"}};
  {
    ChiefHeartbeat beat(tasks, kSecret, "/job:chief/replica:0/task:0");
    std::this_thread::sleep_for(std::chrono::seconds(4));
    EXPECT_EQ(beat.went_silent(), std::vector<bool>{false});
    stop_tasks(tasks, beat.went_silent(), kSecret, "/job:chief/replica:0/task:0",
               deadline_after(5));
  }
  task.join();
  EXPECT_TRUE(served.ok()) << served.message();
  server.stop();
}

TEST(TaskTest, TheHeartbeatSaysWhichTaskWentSilent) {
  RpcServer server(task_server_options());
  StopSignal stop(server);
  Status served(ErrorCode::kInternal, "not run");
  std::future<std::string> endpoint;
  std::thread task = serve_in_background(server, stop, serve_options(30, 60), &served, &endpoint);
  const std::vector<TaskAddress> tasks = {{endpoint.get(), "/job:ps/replica:0/task:0"},
                                          {"tcp://127.0.0.1:1", "/job:ps/replica:0/task:1"}};
  ChiefHeartbeat beat(tasks, kSecret, "/job:chief/replica:0/task:0");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // task 0 answered
  stop_tasks({tasks[0]}, {}, kSecret, "/job:chief/replica:0/task:0", deadline_after(5));
  task.join();
  EXPECT_TRUE(served.ok()) << served.message();
  server.stop();
  // Task 0 answered and then missed two beats; task 1 never answered (not up yet is fine).
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!beat.went_silent()[0] && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(beat.went_silent(), (std::vector<bool>{true, false}));
}

}  // namespace
}  // namespace kolo::ps
