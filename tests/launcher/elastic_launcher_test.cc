// Multi-process tests of kolorun's elastic driver (src/launcher/elastic_driver.h): the real
// kolorun with elastic_fake_worker.cc workers, which follow the worker side of
// docs/elastic.md's store protocol and print "gen G rank R size S id I pid P" once each
// generation's start barrier is done. Control files in a scratch directory tell a worker
// to exit 0, fail, fail before its first barrier, or ask for a reset. 127.0.0.1 plays a
// second host (it is this host, under another name); the stand-in ssh of
// own_launcher_test.cc plays a remote one.
//
// Each test bounds its run time (KolorunProcess kills kolorun past its limit).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <signal.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "launcher_test_util.h"
#include "run_kolorun.h"

namespace kolo::launcher::testing {
namespace {

struct Gen {
  int gen = -1, rank = -1, size = 0, id = -1;
  pid_t pid = 0;
};

// The "gen G rank R ..." lines of `out` for generation `g`, by rank.
std::map<int, Gen> generation(const std::string& out, int g) {
  std::map<int, Gen> by_rank;
  for (const auto& line : lines_of(out)) {
    const size_t at = line.find("] gen ");
    if (at == std::string::npos) continue;
    std::istringstream words(line.substr(at + 2));
    Gen x;
    std::string w1, w2, w3, w4, w5;
    if (words >> w1 >> x.gen >> w2 >> x.rank >> w3 >> x.size >> w4 >> x.id >> w5 >> x.pid &&
        x.gen == g) {
      by_rank[x.rank] = x;
    }
  }
  return by_rank;
}

std::string gen_text(int g) { return "] gen " + std::to_string(g) + " rank "; }

void touch(const ScratchDir& dir, const std::string& name) { dir.write(name, ""); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> elastic(const ScratchDir& dir, std::vector<std::string> args) {
  args.insert(args.end(), {KOLO_ELASTIC_FAKE_WORKER, dir.path()});
  return args;
}

TEST(ElasticLauncher, KillNineShrinksThreeToTwoToOneAndSurvivorsKeepTheirProcesses) {
  ScratchDir dir;
  KolorunProcess p(elastic(dir, {"--min-np", "1", "--max-np", "3"}));
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 3, 20)) << p.out();
  auto g0 = generation(p.out(), 0);
  ASSERT_EQ(g0.size(), 3u);
  ASSERT_EQ(g0[1].id, 1);
  ::kill(g0[1].pid, SIGKILL);
  ASSERT_TRUE(p.wait_for_lines(gen_text(1), 2, 20)) << p.out();
  auto g1 = generation(p.out(), 1);
  // The survivors first, in their old order, with the same processes.
  EXPECT_EQ(g1[0].id, 0);
  EXPECT_EQ(g1[0].pid, g0[0].pid);
  EXPECT_EQ(g1[1].id, 2);
  EXPECT_EQ(g1[1].pid, g0[2].pid);
  EXPECT_EQ(g1[0].size, 2);
  ::kill(g1[1].pid, SIGKILL);
  ASSERT_TRUE(p.wait_for_lines(gen_text(2), 1, 20)) << p.out();
  auto g2 = generation(p.out(), 2);
  EXPECT_EQ(g2[0].id, 0);
  EXPECT_EQ(g2[0].pid, g0[0].pid);
  EXPECT_EQ(g2[0].size, 1);
  touch(dir, "exit0.all");
  RunResult r = p.wait(20);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 1 (host localhost) was killed by signal 9")) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "generation 1 (rank 1 (id 1) failed): 2 workers: id 0 on "
                       "localhost, id 2 on localhost"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "training is over")) << r.err;
}

TEST(ElasticLauncher, AHostAddedByTheDiscoveryScriptGetsANewWorker) {
  ScratchDir dir;
  dir.write("hosts", "localhost:2\n");
  KolorunProcess p(elastic(dir, {"--min-np", "2", "--max-np", "3", "--discovery-interval", "0.2",
                                 "--host-discovery-script", "cat " + dir.path() + "/hosts"}));
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 2, 20)) << p.out();
  dir.write("hosts", "localhost:2\n127.0.0.1:4\n");
  ASSERT_TRUE(p.wait_for_lines(gen_text(1), 3, 20)) << p.out();
  auto g1 = generation(p.out(), 1);
  EXPECT_EQ(g1[2].id, 2);
  EXPECT_EQ(g1[2].size, 3) << "--max-np 3 caps the 6 slots";
  touch(dir, "exit0.all");
  RunResult r = p.wait(20);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "generation 1 (the hosts changed): 3 workers: id 0 on localhost, "
                       "id 1 on localhost, id 2 on 127.0.0.1"))
      << r.err;
}

// A discovery script that hangs does not freeze the driver: it runs on a thread of its
// own, so a killed worker is named and replaced at once (with the script run on the loop,
// output stopped for 10 s at a time and a kill was seen 3.9 s late).
TEST(ElasticLauncher, AHangingDiscoveryScriptDoesNotDelayTheLoop) {
  ScratchDir dir;
  dir.write("hosts", "localhost:3\n");
  const std::string script =
      "if [ -e " + dir.path() + "/hang ]; then sleep 8; fi; cat " + dir.path() + "/hosts";
  KolorunProcess p(elastic(dir, {"--min-np", "1", "--max-np", "3", "--discovery-interval", "0.2",
                                 "--host-discovery-script", script}));
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 3, 20)) << p.out();
  touch(dir, "hang");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // a run is now sleeping
  auto g0 = generation(p.out(), 0);
  ASSERT_EQ(g0.size(), 3u);
  const double killed_at = now_s();
  ::kill(g0[2].pid, SIGKILL);
  EXPECT_TRUE(p.wait_for_lines(gen_text(1), 2, 3)) << p.out();
  EXPECT_LT(now_s() - killed_at, 3.0);
  touch(dir, "exit0.all");
  RunResult r = p.wait(30);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 2 (host localhost) was killed by signal 9")) << r.err;
}

// The script's first hosts are all this host under loopback names: the store and the
// workers listen on 127.0.0.1, so another host it adds later could reach neither. It gets
// no worker (the stand-in ssh would start one that works, being this host) and a warning.
TEST(ElasticLauncher, AnotherHostAddedToAJobOnLoopbackGetsNoWorkerAndAWarning) {
  ScratchDir dir;
  dir.write("hosts", "localhost:2\n");
  auto env = fake_ssh_env(dir);
  KolorunProcess p(elastic(dir, {"--min-np", "2", "--max-np", "3", "--discovery-interval", "0.2",
                                 "--host-discovery-script", "cat " + dir.path() + "/hosts"}),
                   env);
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 2, 20)) << p.out();
  dir.write("hosts", "localhost:2\nhostb:1\n");
  EXPECT_FALSE(p.wait_for_lines(gen_text(1), 1, 2)) << p.out();
  touch(dir, "exit0.all");
  RunResult r = p.wait(20);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.err,
                  "kolorun: warning: host hostb (from the discovery script) is not this host, but "
                  "this job's store and workers listen on 127.0.0.1 only"),
            1)
      << r.err;
  EXPECT_TRUE(contains(r.err, "give --rendezvous-addr")) << r.err;
  EXPECT_FALSE(contains(r.err, "generation 1")) << r.err;
}

TEST(ElasticLauncher, AHostRemovedByTheDiscoveryScriptLosesItsWorkerWithoutAFailure) {
  ScratchDir dir;
  dir.write("hosts", "localhost:2\n127.0.0.1:1\n");
  KolorunProcess p(elastic(dir, {"--min-np", "2", "--max-np", "3", "--discovery-interval", "0.2",
                                 "--host-discovery-script", "cat " + dir.path() + "/hosts"}));
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 3, 20)) << p.out();
  const pid_t removed = generation(p.out(), 0)[2].pid;
  dir.write("hosts", "localhost:2\n");
  ASSERT_TRUE(p.wait_for_lines(gen_text(1), 2, 20)) << p.out();
  ASSERT_TRUE(p.wait_for_lines("] gen 1 removed id 2", 1, 10)) << p.out();
  for (int i = 0; i < 100 && alive(removed); ++i) ::usleep(20000);
  EXPECT_FALSE(alive(removed));
  touch(dir, "exit0.all");
  RunResult r = p.wait(20);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "rank 2 (host 127.0.0.1) exited normally (it was no longer in the "
                       "plan)"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "blacklisted")) << r.err;
}

TEST(ElasticLauncher, ARemovedWorkerThatStaysIsStoppedTenSecondsAfterTheOthersArrived) {
  ScratchDir dir;
  dir.write("hosts", "localhost:1\n127.0.0.1:1\n");
  touch(dir, "stay.1");
  KolorunProcess p(elastic(dir, {"--min-np", "1", "--max-np", "2", "--discovery-interval", "0.2",
                                 "--host-discovery-script", "cat " + dir.path() + "/hosts"}));
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 2, 20)) << p.out();
  const pid_t removed = generation(p.out(), 0)[1].pid;
  dir.write("hosts", "localhost:1\n");
  ASSERT_TRUE(p.wait_for_lines(gen_text(1), 1, 20)) << p.out();
  const double arrived = now_s();
  while (alive(removed) && now_s() - arrived < 20) ::usleep(50000);
  const double took = now_s() - arrived;
  EXPECT_FALSE(alive(removed));
  EXPECT_GT(took, 8);
  EXPECT_LT(took, 14);
  touch(dir, "exit0.all");
  RunResult r = p.wait(20);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "rank 1 (id 1) is no longer in the plan and did not leave: "
                       "stopping it"))
      << r.err;
}

TEST(ElasticLauncher, EveryWorkerFailingEndsTheJobWithTheirExits) {
  ScratchDir dir;
  touch(dir, "fail.all");
  RunResult r = run_kolorun(elastic(dir, {"-np", "3", "--min-np", "1"}), 30);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: every worker of the elastic job failed: ")) << r.err;
  EXPECT_EQ(count(r.err, "exited with status 3"), 6) << r.err;  // each named, then all three
  EXPECT_LT(r.seconds, 10);
}

TEST(ElasticLauncher, TooFewSlotsForLongerThanTheElasticTimeoutEndsTheJob) {
  ScratchDir dir;
  // A cooldown: localhost could come back, so the driver waits (for good: it stops at once).
  KolorunProcess p(elastic(dir, {"--min-np", "2", "--max-np", "2", "--elastic-timeout", "2",
                                 "--blacklist-cooldown-range", "60", "60"}));
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 2, 20)) << p.out();
  const double killed = now_s();
  ::kill(generation(p.out(), 0)[1].pid, SIGKILL);
  RunResult r = p.wait(20);
  const double took = now_s() - killed;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.err,
                       "kolorun: the elastic job had 1 usable slot of --min-np 2 for 2 s "
                       "(--elastic-timeout); stopping"))
      << r.err;
  EXPECT_GT(took, 1.8);
  EXPECT_LT(took, 6);
}

TEST(ElasticLauncher, EveryHostBlacklistedEndsTheJobAtOnce) {
  ScratchDir dir;
  KolorunProcess p(elastic(dir, {"--min-np", "2", "--max-np", "2"}));
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 2, 20)) << p.out();
  ::kill(generation(p.out(), 0)[0].pid, SIGKILL);
  RunResult r = p.wait(20);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: every host is blacklisted")) << r.err;
  EXPECT_LT(r.seconds, 10);
}

// Two failures: --reset-limit 1 allows one reset (generation 1), 2 allows both.
TEST(ElasticLauncher, TheResetLimitEndsTheJob) {
  for (int limit : {1, 2}) {
    ScratchDir dir;
    KolorunProcess p(
        elastic(dir, {"--min-np", "1", "--max-np", "3", "--reset-limit", std::to_string(limit)}));
    ASSERT_TRUE(p.wait_for_lines(gen_text(0), 3, 20)) << p.out();
    ::kill(generation(p.out(), 0)[2].pid, SIGKILL);
    ASSERT_TRUE(p.wait_for_lines(gen_text(1), 2, 20)) << p.out();
    ::kill(generation(p.out(), 1)[1].pid, SIGKILL);
    if (limit == 2) {
      ASSERT_TRUE(p.wait_for_lines(gen_text(2), 1, 20)) << p.out();
      touch(dir, "exit0.all");
    }
    RunResult r = p.wait(20);
    ASSERT_FALSE(r.timed_out) << r.err;
    if (limit == 1) {
      EXPECT_EQ(r.status, 137) << r.err;
      EXPECT_TRUE(contains(r.err,
                           "kolorun: the job was reset 2 times, the reset limit "
                           "(--reset-limit 1); stopping"))
          << r.err;
    } else {
      EXPECT_EQ(r.status, 0) << r.err;
    }
  }
}

TEST(ElasticLauncher, ABlacklistedHostGetsNoNewWorkerUntilItsCooldownEnds) {
  for (bool cooldown : {false, true}) {
    ScratchDir dir;
    std::vector<std::string> args = {"-H", "localhost:1,127.0.0.1:1", "--min-np", "1", "--max-np",
                                     "2"};
    if (cooldown) args.insert(args.end(), {"--blacklist-cooldown-range", "1", "2"});
    KolorunProcess p(elastic(dir, args));
    ASSERT_TRUE(p.wait_for_lines(gen_text(0), 2, 20)) << p.out();
    const double killed = now_s();
    ::kill(generation(p.out(), 0)[1].pid, SIGKILL);  // id 1, on 127.0.0.1
    ASSERT_TRUE(p.wait_for_lines(gen_text(1), 1, 20)) << p.out();
    if (cooldown) {
      // 1 * 2^1 + U(0,1) * 1, clamped to 2 s: a new worker there after 2 s.
      ASSERT_TRUE(p.wait_for_lines(gen_text(2), 2, 20)) << p.out();
      EXPECT_GT(now_s() - killed, 1.8);
      auto g2 = generation(p.out(), 2);
      EXPECT_EQ(g2[0].id, 0);
      EXPECT_EQ(g2[1].id, 2);
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      EXPECT_EQ(count(p.out(), gen_text(2)), 0) << p.out();
    }
    touch(dir, "exit0.all");
    RunResult r = p.wait(20);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "host 127.0.0.1 is blacklisted")) << r.err;
    EXPECT_EQ(contains(r.err,
                       "generation 2 (a blacklisted host's cooldown ended): 2 workers: "
                       "id 0 on localhost, id 2 on 127.0.0.1"),
              cooldown)
        << r.err;
  }
}

TEST(ElasticLauncher, AWorkerFailingDuringTheStartBarrierIsReplaced) {
  ScratchDir dir;
  touch(dir, "failstart.1");
  KolorunProcess p(elastic(dir, {"-np", "3", "--min-np", "2"}));
  ASSERT_TRUE(p.wait_for_lines(gen_text(1), 2, 20)) << p.out();
  auto g1 = generation(p.out(), 1);
  EXPECT_EQ(g1[0].id, 0);
  EXPECT_EQ(g1[1].id, 2);
  EXPECT_EQ(count(p.out(), gen_text(0)), 0) << "generation 0 never met: " << p.out();
  touch(dir, "exit0.all");
  RunResult r = p.wait(20);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 (host localhost) exited with status 4")) << r.err;
}

TEST(ElasticLauncher, AResetRequestWritesANewPlanOfTheSameWorkers) {
  ScratchDir dir;
  KolorunProcess p(elastic(dir, {"-np", "2", "--min-np", "2"}));
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 2, 20)) << p.out();
  touch(dir, "reset.0");
  ASSERT_TRUE(p.wait_for_lines(gen_text(1), 2, 20)) << p.out();
  auto g0 = generation(p.out(), 0), g1 = generation(p.out(), 1);
  EXPECT_EQ(g1[0].pid, g0[0].pid);
  EXPECT_EQ(g1[1].pid, g0[1].pid);
  touch(dir, "exit0.all");
  RunResult r = p.wait(20);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "generation 1 (a worker asked for a reset)")) << r.err;
}

TEST(ElasticLauncher, ARemoteWorkersEndComesBackThroughSsh) {
  ScratchDir dir;
  auto env = fake_ssh_env(dir);
  KolorunProcess p(elastic(dir, {"-H", "localhost:1,hostb:1", "--rendezvous-addr", "127.0.0.1",
                                 "--min-np", "1", "--max-np", "2"}),
                   env);
  ASSERT_TRUE(p.wait_for_lines(gen_text(0), 2, 20)) << p.out();
  ::kill(generation(p.out(), 0)[1].pid, SIGKILL);
  ASSERT_TRUE(p.wait_for_lines(gen_text(1), 1, 20)) << p.out();
  touch(dir, "exit0.all");
  RunResult r = p.wait(20);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 1 (host hostb) was killed by signal 9")) << r.err;
  EXPECT_TRUE(contains(r.err, "host hostb is blacklisted")) << r.err;
}

TEST(ElasticLauncher, ClearErrorsOnTheCommandLine) {
  ScratchDir dir;
  auto err_of = [](const std::vector<std::string>& args) {
    RunResult r = run_kolorun(args, 20);
    EXPECT_EQ(r.status, 2) << r.err;
    return r.err;
  };
  EXPECT_TRUE(contains(err_of({"--min-np", "3", "--max-np", "2", "true"}),
                       "--min-np 3 is above --max-np 2"));
  EXPECT_TRUE(
      contains(err_of({"--min-np", "2", "--mpi", "true"}),
               "elastic jobs run on kolorun's own launcher and Gloo; --mpi is not elastic"));
  EXPECT_TRUE(contains(err_of({"--min-np", "1", "--host-discovery-script", "exit 7", "true"}),
                       "exited with status 7 (on its first run)"));
  dir.write("hosts", "a:2\nb:two\n");
  EXPECT_TRUE(contains(
      err_of({"--min-np", "1", "--host-discovery-script", "cat " + dir.path() + "/hosts", "true"}),
      "line 2, 'b:two'"));
  EXPECT_TRUE(contains(err_of({"-np", "2", "--reset-limit", "1", "true"}),
                       "--reset-limit belongs to an elastic job"));
  EXPECT_TRUE(contains(err_of({"--min-np", "3", "-H", "localhost:2", "true"}),
                       "--min-np 3 is more than the 2 slots of localhost:2"));
}

// Where the workers reach the store with a discovery script: 127.0.0.1 while its first
// hosts name this host by loopback names or its host name, this host's own address where
// one of them is that address (other hosts it adds can then reach it).
TEST(ElasticLauncher, ADiscoveryScriptNamingThisHostsAddressListensBeyondThisHost) {
  auto addr_of = [](const std::string& script_prints) {
    RunResult r = run_kolorun({"--dry-run", "--min-np", "1", "--host-discovery-script",
                               "echo " + script_prints, "./train"});
    EXPECT_EQ(r.status, 0) << r.err;
    const size_t at = r.out.find("KOLO_RENDEZVOUS_ADDR=");
    return at == std::string::npos ? r.out : r.out.substr(at, r.out.find(' ', at) - at);
  };
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(addr_of("localhost:2"), "KOLO_RENDEZVOUS_ADDR=127.0.0.1:PORT");
  EXPECT_EQ(addr_of(std::string(name) + ":2"), "KOLO_RENDEZVOUS_ADDR=127.0.0.1:PORT")
      << "a host name may resolve to a loopback address";
  std::string own;  // an IPv4 address of this host's interfaces, not loopback
  ifaddrs* list = nullptr;
  ASSERT_EQ(::getifaddrs(&list), 0);
  for (const ifaddrs* i = list; i != nullptr && own.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) &&
        std::string(text).rfind("127.", 0)) {
      own = text;
    }
  }
  ::freeifaddrs(list);
  if (own.empty()) GTEST_SKIP() << "this host has no IPv4 address but loopback";
  EXPECT_EQ(addr_of(own + ":2"), "KOLO_RENDEZVOUS_ADDR=" + own + ":PORT");
}

TEST(ElasticLauncher, DryRunShowsTheFirstPlan) {
  RunResult r = run_kolorun(
      {"--dry-run", "--min-np", "2", "--max-np", "3", "-H", "localhost:2,127.0.0.1:2", "./train"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_TRUE(contains(lines[0], "[0] localhost: env ")) << lines[0];
  EXPECT_TRUE(contains(lines[2], "[2] 127.0.0.1: env ")) << lines[2];
  EXPECT_TRUE(contains(lines[2], " KOLO_ELASTIC=1 KOLO_ELASTIC_GENERATION=0 KOLO_ELASTIC_ID=2 "))
      << lines[2];
  EXPECT_TRUE(contains(lines[2], " KOLO_RANK=2 ")) << lines[2];
  EXPECT_TRUE(contains(lines[2], " KOLO_SIZE=3 ")) << lines[2];
}

}  // namespace
}  // namespace kolo::launcher::testing
