// Coordinator and WorkerService over real RpcServers in this process: every step runs,
// a failing step is fatal and cancels the queue, a worker that goes away loses only its
// in-flight step (run again elsewhere) and is used again when it comes back, synchronous
// rounds go to different workers, no worker at all is an error in the bound.
#include "ps/coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

namespace kolo::ps {
namespace {

using namespace std::chrono_literals;

struct Worker {
  explicit Worker(int index, const std::string& endpoint = "tcp://127.0.0.1:0") : index(index) {
    start(endpoint);
  }
  void start(const std::string& endpoint) {
    server = std::make_unique<RpcServer>(
        RpcServerOptions{.endpoint = endpoint,
                         .secret = "s",
                         .name = "/job:worker/replica:0/task:" + std::to_string(index)});
    service = std::make_unique<WorkerService>(*server);
    service->register_step("echo", [this](const std::string& args, std::string* out) {
      const int ms = delay_ms.load();
      if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      ++ran;
      *out = args + "@" + std::to_string(this->index);
      return Status::OK();
    });
    service->register_step("fail", [](const std::string& args, std::string*) {
      return InvalidArgument("bad input " + args);
    });
    ASSERT_TRUE(server->start().ok());
    address = server->endpoint();
  }
  // The server's handlers use the service: the server stops first.
  ~Worker() {
    if (server) stop();
  }
  void stop() {
    server->stop();
    service.reset();
    server.reset();
  }
  int index;
  std::atomic<int> delay_ms{0};  // the handler threads read it while the test sets it
  std::atomic<int> ran{0};
  std::string address;
  std::unique_ptr<RpcServer> server;
  std::unique_ptr<WorkerService> service;
};

CoordinatorOptions options_for(const std::vector<Worker*>& workers) {
  CoordinatorOptions o;
  for (Worker* w : workers) o.worker_endpoints.push_back(w->address);
  o.secret = "s";
  o.ping_interval_seconds = 0.1;
  o.ping_timeout_seconds = 0.5;
  o.rejoin_interval_seconds = 0.1;
  o.no_worker_timeout_seconds = 20;
  return o;
}

TEST(CoordinatorTest, EveryStepRunsOnSomeWorkerAndGivesItsResult) {
  Worker a(0), b(1);
  a.delay_ms = 5;
  b.delay_ms = 5;
  Coordinator c(options_for({&a, &b}));
  std::vector<RemoteValue> values(40);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(c.schedule("echo", std::to_string(i), &values[i]).ok());
  ASSERT_TRUE(c.join(deadline_after(30)).ok());
  EXPECT_TRUE(c.done());
  std::set<int> used;
  for (int i = 0; i < 40; ++i) {
    std::string r;
    ASSERT_TRUE(values[i].fetch(&r).ok());
    EXPECT_EQ(r, std::to_string(i) + "@" + std::to_string(values[i].worker()));
    EXPECT_EQ(values[i].attempts(), 1);
    used.insert(values[i].worker());
  }
  EXPECT_EQ(used.size(), 2u);  // both workers took steps
  EXPECT_EQ(a.ran + b.ran, 40);
}

TEST(CoordinatorTest, AFailingStepIsFatalCancelsTheQueueAndIsReportedOnce) {
  Worker a(0);
  a.delay_ms = 20;
  Coordinator c(options_for({&a}));
  RemoteValue first, bad, later;
  ASSERT_TRUE(c.schedule("echo", "x", &first).ok());
  ASSERT_TRUE(c.schedule("fail", "7", &bad).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.schedule("echo", "y", &later).ok());
  Status s = c.join(deadline_after(30));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the step 'fail' failed on /job:worker/replica:0/task:0: bad input 7"),
            std::string::npos)
      << s.message();
  std::string r;
  EXPECT_TRUE(first.fetch(&r).ok());
  EXPECT_EQ(bad.fetch(&r).code(), ErrorCode::kInvalidArgument);
  Status cancelled = later.fetch(&r, deadline_after(5));
  EXPECT_NE(cancelled.message().find("cancelled: an earlier step failed"), std::string::npos)
      << cancelled.message();
  // Reported once: the next join is clean and new steps run.
  EXPECT_TRUE(c.join(deadline_after(5)).ok());
  RemoteValue again;
  ASSERT_TRUE(c.schedule("echo", "z", &again).ok());
  ASSERT_TRUE(c.join(deadline_after(30)).ok());
  EXPECT_TRUE(again.fetch(&r).ok());
}

TEST(CoordinatorTest, AnUnregisteredStepIsNamed) {
  Worker a(0);
  Coordinator c(options_for({&a}));
  RemoteValue v;
  ASSERT_TRUE(c.schedule("nope", "", &v).ok());
  Status s = c.join(deadline_after(30));
  EXPECT_NE(s.message().find("no step named 'nope'"), std::string::npos) << s.message();
}

TEST(CoordinatorTest, ScheduleRaisesAPendingErrorAsTensorFlowDoes) {
  Worker a(0);
  Coordinator c(options_for({&a}));
  RemoteValue v;
  ASSERT_TRUE(c.schedule("fail", "1", &v).ok());
  std::string r;
  (void)v.fetch(&r, deadline_after(30));
  Status s = c.schedule("echo", "", &v);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.message();
  EXPECT_TRUE(c.schedule("echo", "", &v).ok());  // cleared
  EXPECT_TRUE(c.join(deadline_after(30)).ok());
}

TEST(CoordinatorTest, ALostWorkersStepRunsAgainElsewhereAndTheWorkerRejoins) {
  Worker a(0), b(1);
  a.delay_ms = 2000;  // a's first step is in flight when it goes away
  b.delay_ms = 5;
  CoordinatorOptions o = options_for({&a, &b});
  Coordinator c(o);
  std::vector<RemoteValue> values(10);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c.schedule("echo", std::to_string(i), &values[i]).ok());
  // Wait until a holds a step, then take it away.
  for (int i = 0; i < 200 && c.workers_up() < 2; ++i) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(200ms);
  const std::string a_address = a.address;
  a.stop();
  ASSERT_TRUE(c.join(deadline_after(30)).ok());
  int retried = 0;
  for (auto& v : values) {
    std::string r;
    ASSERT_TRUE(v.fetch(&r).ok());
    if (v.attempts() > 1) {
      ++retried;
      EXPECT_EQ(v.worker(), 1);
    }
  }
  EXPECT_EQ(retried, 1);
  EXPECT_EQ(c.worker_failures(), 1);
  EXPECT_EQ(c.workers_up(), 1);

  // The task comes back at its address and takes steps again.
  a.delay_ms = 0;
  a.start(a_address);
  for (int i = 0; i < 100 && c.workers_up() < 2; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(c.workers_up(), 2);
  EXPECT_EQ(c.worker_rejoins(), 1);
  b.delay_ms = 50;
  std::vector<RemoteValue> more(10);
  for (auto& v : more) ASSERT_TRUE(c.schedule("echo", "m", &v).ok());
  ASSERT_TRUE(c.join(deadline_after(30)).ok());
  EXPECT_GT(a.ran, 0);
}

TEST(CoordinatorTest, AWorkerRestartedAtItsAddressLosesItsStepWhichRunsAgain) {
  // The restarted task answers pings, so only its new incarnation says that the step sent
  // to the old process will never be answered. (Here the old server's graceful stop also
  // loses a ping; a killed process's restart does not: ps.faults is the test that needs
  // the incarnation, it waited for the 600 s step timeout without it.)
  Worker a(0);
  a.delay_ms = 1500;
  CoordinatorOptions o = options_for({&a});
  o.step_timeout_seconds = 60;
  o.ping_timeout_seconds = 5;  // longer than the restart: a ping waiting meanwhile is answered
  Coordinator c(o);
  RemoteValue v;
  ASSERT_TRUE(c.schedule("echo", "s", &v).ok());
  for (int i = 0; i < 200 && c.workers_up() < 1; ++i) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(200ms);  // the step is running on the first process
  const std::string address = a.address;
  a.stop();
  a.delay_ms = 0;
  a.start(address);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(c.join(deadline_after(20)).ok());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string r;
  ASSERT_TRUE(v.fetch(&r).ok());
  EXPECT_EQ(r, "s@0");
  EXPECT_EQ(v.attempts(), 2);
  EXPECT_EQ(c.worker_failures(), 1);
  EXPECT_LT(took, 10);  // not the step timeout
}

TEST(CoordinatorTest, SynchronousRoundsGoToDifferentWorkers) {
  Worker a(0), b(1), w2(2);
  CoordinatorOptions o = options_for({&a, &b, &w2});
  o.round_size = 3;
  Coordinator c(o);
  std::vector<RemoteValue> values(30);
  for (auto& v : values) ASSERT_TRUE(c.schedule("echo", "", &v).ok());
  ASSERT_TRUE(c.join(deadline_after(30)).ok());
  for (int round = 0; round < 10; ++round) {
    std::set<int> workers;
    for (int k = 0; k < 3; ++k) workers.insert(values[round * 3 + k].worker());
    EXPECT_EQ(workers.size(), 3u) << "round " << round;
  }
}

TEST(CoordinatorTest, NoWorkerAtAllFailsJoinInTheBoundNamingThem) {
  CoordinatorOptions o;
  o.worker_endpoints = {"tcp://127.0.0.1:9"};  // nothing listens there
  o.secret = "s";
  o.ping_timeout_seconds = 0.2;
  o.rejoin_interval_seconds = 0.1;
  o.no_worker_timeout_seconds = 1;
  Coordinator c(o);
  RemoteValue v;
  ASSERT_TRUE(c.schedule("echo", "", &v).ok());
  const auto t0 = std::chrono::steady_clock::now();
  Status s = c.join(deadline_after(30));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("no worker has answered for 1 s"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/job:worker/replica:0/task:0"), std::string::npos) << s.message();
  EXPECT_LT(took, 5);
}

TEST(WorkerServiceTest, WaitsForTheChiefsStopWithABound) {
  RpcServer server(RpcServerOptions{.endpoint = "tcp://127.0.0.1:0", .secret = "s", .name = "w"});
  WorkerService service(server);
  ASSERT_TRUE(server.start().ok());
  EXPECT_EQ(service.wait_until_stopped(deadline_after(0.2)).code(), ErrorCode::kPeerFailure);
  CoordinatorOptions o;
  o.worker_endpoints = {server.endpoint()};
  o.secret = "s";
  Coordinator c(o);
  c.stop_workers(deadline_after(10));
  EXPECT_TRUE(service.wait_until_stopped(deadline_after(5)).ok());
  server.stop();  // before the service its handlers use
}

}  // namespace
}  // namespace kolo::ps
