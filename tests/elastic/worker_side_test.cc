// The worker side of elastic jobs (kolo::init in elastic mode, kolo::WorkersChanged,
// kolo::elastic::reset and hosts_updated) across real processes, with kolorun's elastic
// driver played by the test: it runs the job's store server, writes the plans and exit
// notices of docs/elastic.md's protocol, and starts elastic_core_worker.cc processes.
// So the runtime's generations are tested apart from the driver (the driver's own tests
// are in tests/launcher; whole jobs through kolorun in elastic_job_test.sh).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/elastic_keys.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"

#ifndef KOLO_ELASTIC_CORE_WORKER
#error "KOLO_ELASTIC_CORE_WORKER: the path of kolo_elastic_core_worker"
#endif

namespace kolo {
namespace {

namespace ek = rendezvous::elastic_keys;
using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class FakeDriver {
 public:
  FakeDriver() {
    char dir[] = "/tmp/kolo_elastic_XXXXXX";
    dir_ = ::mkdtemp(dir);
    rendezvous::TcpStoreServerOptions so;
    so.secret = "test-secret";
    EXPECT_TRUE(rendezvous::TcpStoreServer::start(so, &server_).ok());
    rendezvous::TcpStoreOptions co;
    co.port = server_->port();
    co.secret = so.secret;
    EXPECT_TRUE(rendezvous::TcpStore::connect(co, &store_).ok());
  }
  ~FakeDriver() {
    for (auto& [id, pid] : pids_) {
      if (pid > 0) ::kill(pid, SIGKILL), ::waitpid(pid, nullptr, 0);
      // In the sanitizer trees (scripts/sanitize.sh) a worker's report goes to its log; a
      // test that expects the worker to fail would not notice it by the exit status.
      EXPECT_EQ(log(id).find("Sanitizer"), std::string::npos) << log(id);
    }
    std::system(("rm -rf " + dir_).c_str());
  }

  void plan(std::int64_t g, const std::vector<std::int64_t>& ids) {
    std::vector<ek::Member> members;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      members.push_back(
          {ids[i], "localhost", static_cast<int>(i), static_cast<int>(ids.size()), 0, 1});
    }
    plans_[g] = ids;
    ASSERT_TRUE(store_->set(ek::plan_key(g), ek::format_plan(members)).ok());
    std::int64_t count = 0;
    ASSERT_TRUE(store_->add(ek::kGenerationsKey, 1, &count).ok());
    ASSERT_EQ(count, g + 1);
  }

  void start(std::int64_t id, std::int64_t generation, const std::string& steps,
             const std::string& check, const std::string& more_env = "") {
    const std::string log = dir_ + "/w" + std::to_string(id) + ".log";
    std::vector<std::string> env = {
        "KOLO_ELASTIC=1",
        "KOLO_ELASTIC_ID=" + std::to_string(id),
        "KOLO_ELASTIC_GENERATION=" + std::to_string(generation),
        "KOLO_RANK=0",
        "KOLO_SIZE=1",
        "KOLO_LOCAL_RANK=0",
        "KOLO_LOCAL_SIZE=1",
        "KOLO_RENDEZVOUS_ADDR=127.0.0.1:" + std::to_string(server_->port()),
        "KOLO_RENDEZVOUS_SECRET=test-secret",
        "KOLO_HOST_ADDR=127.0.0.1",
        "KOLO_ELASTIC_TIMEOUT_SECONDS=30",
        "KOLO_LOG_LEVEL=info",
        "PATH=/usr/bin:/bin",
    };
    if (!more_env.empty()) env.push_back(more_env);
    // The sanitizer trees' options (suppressions, halt_on_error) reach the workers too.
    for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"}) {
      if (const char* value = std::getenv(name)) env.push_back(std::string(name) + "=" + value);
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::FILE* f = std::fopen(log.c_str(), "w");
      ::dup2(fileno(f), 1);
      ::dup2(fileno(f), 2);
      std::vector<char*> envp, argv;
      for (auto& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
      std::string exe = KOLO_ELASTIC_CORE_WORKER, sleep = "20";
      std::string s = steps, c = check;
      argv = {exe.data(), s.data(), sleep.data(), c.data(), nullptr};
      ::execve(exe.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    pids_[id] = pid;
  }

  // kill -9 and the exit notice kolorun's driver publishes for every generation that
  // holds the worker. Returns the time of the kill.
  Clock::time_point kill(std::int64_t id) {
    const auto t = Clock::now();
    ::kill(pids_[id], SIGKILL);
    ::waitpid(pids_[id], nullptr, 0);
    pids_[id] = -1;
    for (const auto& [g, ids] : plans_) {
      const int rank = static_cast<int>(std::find(ids.begin(), ids.end(), id) - ids.begin());
      if (rank >= static_cast<int>(ids.size())) continue;
      const std::string prefix = ek::launcher_prefix(g);
      EXPECT_TRUE(store_
                      ->set(prefix + "/exit/" + std::to_string(rank),
                            "rank " + std::to_string(rank) +
                                " (host localhost) was killed by signal 9 (SIGKILL)")
                      .ok());
      std::int64_t n = 0;
      EXPECT_TRUE(store_->add(prefix + "/exits", 1, &n).ok());
    }
    return t;
  }

  std::string log(std::int64_t id) const {
    return read_file(dir_ + "/w" + std::to_string(id) + ".log");
  }
  pid_t pid(std::int64_t id) { return pids_[id]; }

  // Waits (bounded) until the worker's log holds `text`.
  bool wait_for(std::int64_t id, const std::string& text, double seconds = 60) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      if (log(id).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Reaps the worker (bounded); its exit status, or -1 past the bound.
  int wait_exit(std::int64_t id, double seconds = 60) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      int status = 0;
      if (::waitpid(pids_[id], &status, WNOHANG) == pids_[id]) {
        pids_[id] = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  rendezvous::Store& store() { return *store_; }

 private:
  std::string dir_;
  std::unique_ptr<rendezvous::TcpStoreServer> server_;
  std::unique_ptr<rendezvous::TcpStore> store_;
  std::map<std::int64_t, pid_t> pids_;
  std::map<std::int64_t, std::vector<std::int64_t>> plans_;
};

// The first t_ms of a "gen G ..." line in `log`, or -1.
long long first_step_ms(const std::string& log, int generation) {
  const std::string tag = "gen " + std::to_string(generation) + " ";
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(tag, 0) != 0) continue;
    const auto at = line.find("t_ms ");
    if (at != std::string::npos) return std::atoll(line.c_str() + at + 5);
  }
  return -1;
}

long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(ElasticWorkerSide, SurvivorsOfAKilledWorkerFormTheNextGeneration) {
  FakeDriver d;
  d.plan(0, {0, 1, 2});
  for (int id = 0; id < 3; ++id) d.start(id, 0, "60", "0");
  for (int id = 0; id < 3; ++id) ASSERT_TRUE(d.wait_for(id, "step 10 ok 1")) << d.log(id);
  const pid_t survivor0 = d.pid(0), survivor2 = d.pid(2);
  const long long killed_ms = wall_ms();
  d.kill(1);
  d.plan(1, {2, 0});  // the driver's order: survivors by their previous rank... here reversed
  EXPECT_EQ(d.wait_exit(0), 0) << d.log(0);
  EXPECT_EQ(d.wait_exit(2), 0) << d.log(2);
  const std::string a = d.log(0), c = d.log(2);
  EXPECT_NE(a.find("workers changed"), std::string::npos) << a;
  EXPECT_NE(a.find("gen 1 rank 1 size 2"), std::string::npos) << a;
  EXPECT_NE(c.find("gen 1 rank 0 size 2"), std::string::npos) << c;
  EXPECT_EQ(a.find("ok 0"), std::string::npos) << a;
  // The same processes went on (the pid each printed in generation 1 is the one started).
  EXPECT_NE(a.find("pid " + std::to_string(survivor0) + " t_ms"), std::string::npos);
  EXPECT_NE(c.find("done pid " + std::to_string(survivor2)), std::string::npos) << c;
  const long long first = std::max(first_step_ms(a, 1), first_step_ms(c, 1));
  ASSERT_GT(first, 0);
  std::printf("recovery: kill -9 -> first step of generation 1 in %lld ms\n", first - killed_ms);
}

TEST(ElasticWorkerSide, ANewWorkerJoinsAtTheNextCheckAndAWorkerCanBeRemoved) {
  FakeDriver d;
  d.plan(0, {0, 1});
  d.start(0, 0, "80", "5");
  d.start(1, 0, "80", "5");
  ASSERT_TRUE(d.wait_for(0, "step 10 ok 1")) << d.log(0);
  d.plan(1, {0, 1, 2});
  d.start(2, 1, "80", "5");
  ASSERT_TRUE(d.wait_for(2, "gen 1 rank 2 size 3")) << d.log(2);
  ASSERT_TRUE(d.wait_for(0, "gen 1 rank 0 size 3")) << d.log(0);
  EXPECT_NE(d.log(0).find("hosts updated"), std::string::npos);
  // Worker 1 leaves the plan (its host left): it finds itself out at the next check.
  d.plan(2, {0, 2});
  EXPECT_EQ(d.wait_exit(1), 0) << d.log(1);
  EXPECT_NE(d.log(1).find("removed"), std::string::npos) << d.log(1);
  EXPECT_EQ(d.wait_exit(0), 0) << d.log(0);
  EXPECT_EQ(d.wait_exit(2), 0) << d.log(2);
  EXPECT_NE(d.log(2).find("gen 2 rank 1 size 2"), std::string::npos) << d.log(2);
  EXPECT_EQ(d.log(0).find("ok 0"), std::string::npos) << d.log(0);
  EXPECT_EQ(d.log(2).find("ok 0"), std::string::npos) << d.log(2);
}

TEST(ElasticWorkerSide, TheMpiTransportIsRefused) {
  FakeDriver d;
  d.plan(0, {0});
  d.start(0, 0, "5", "0", "KOLO_TRANSPORT=mpi");
  EXPECT_NE(d.wait_exit(0), 0);
  EXPECT_NE(d.log(0).find("elastic jobs run on the Gloo transport, but KOLO_TRANSPORT is 'mpi'"),
            std::string::npos)
      << d.log(0);
}

}  // namespace
}  // namespace kolo
