// Multi-process tests of kolorun's --mpi path: real kolorun, real mpirun, shell-script
// workers. (kolorun's own launcher, the default: own_launcher_test.cc.)
//
// Each test bounds its run time (RunKolorun kills kolorun past its limit and the test
// fails). Failure paths use a short --grace-seconds so that the suite stays fast.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "run_kolorun.h"
#include "startup/config.h"

namespace kolo::launcher::testing {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::multiset<std::string> line_set(const std::string& text) {
  auto lines = lines_of(text);
  return {lines.begin(), lines.end()};
}

TEST(Kolorun, PrefixesEachWorkersOutputWithItsRank) {
  RunResult r = run_kolorun({"--mpi", "-np", "3", "sh", "-c", "echo $KOLO_RANK"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] 0", "[1] 1", "[2] 2"})) << r.out;
  EXPECT_FALSE(contains(r.err, "kolorun:")) << r.err;
}

class KolorunRanks : public ::testing::TestWithParam<int> {};

TEST_P(KolorunRanks, EveryWorkerSeesConsistentVariables) {
  const int np = GetParam();
  RunResult r =
      run_kolorun({"--mpi", "-np", std::to_string(np), "sh", "-c",
                   "echo $KOLO_RANK $KOLO_SIZE $KOLO_LOCAL_RANK $KOLO_LOCAL_SIZE $KOLO_CROSS_RANK "
                   "$KOLO_CROSS_SIZE"});
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  std::set<int> ranks;
  for (const auto& line : lines_of(r.out)) {
    int prefix, rank, size, local_rank, local_size, cross_rank, cross_size;
    ASSERT_EQ(std::sscanf(line.c_str(), "[%d] %d %d %d %d %d %d", &prefix, &rank, &size,
                          &local_rank, &local_size, &cross_rank, &cross_size),
              7)
        << line;
    EXPECT_EQ(prefix, rank) << line;
    EXPECT_EQ(size, np) << line;
    // One host: local ranks are the ranks, and each cross group is one worker.
    EXPECT_EQ(local_rank, rank) << line;
    EXPECT_EQ(local_size, np) << line;
    EXPECT_EQ(cross_rank, 0) << line;
    EXPECT_EQ(cross_size, 1) << line;
    ranks.insert(rank);
  }
  EXPECT_EQ(static_cast<int>(ranks.size()), np) << r.out;
  EXPECT_EQ(*ranks.begin(), 0);
  EXPECT_EQ(*ranks.rbegin(), np - 1);
}

INSTANTIATE_TEST_SUITE_P(Sizes, KolorunRanks, ::testing::Values(2, 3, 4));

TEST(Kolorun, LeavesTheProgramsArgumentsAlone) {
  RunResult r = run_kolorun(
      {"--mpi", "-np", "1", "sh", "-c", "echo \"$@\"", "x", "-np", "5", "--help", "-H", "a"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[0] -np 5 --help -H a\n");
  r = run_kolorun({"--mpi", "--np=1", "--", "sh", "-c", "echo ok"});
  EXPECT_EQ(r.out, "[0] ok\n") << r.err;
}

TEST(Kolorun, KeepsStdoutAndStderrApart) {
  RunResult r = run_kolorun({"--mpi", "-np", "2", "sh", "-c",
                             "echo out $KOLO_RANK; echo err $KOLO_RANK >&2; printf tail"});
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(line_set(r.out),
            (std::multiset<std::string>{"[0] out 0", "[1] out 1", "[0] tail", "[1] tail"}))
      << r.out;
  EXPECT_EQ(line_set(r.err), (std::multiset<std::string>{"[0] err 0", "[1] err 1"})) << r.err;
}

// A successful worker's background processes (here a shell's `sleep &`, which also keeps
// its stdout open) end with the worker instead of outliving kolorun; the program does not
// see the launcher's marker token.
TEST(Kolorun, ProcessesAWorkerLeavesBehindEndWithIt) {
  char dir[] = "/tmp/kolorun_leftover_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string pids = std::string(dir) + "/pid.";
  RunResult r = run_kolorun(
      {"--mpi", "-np", "2", "sh", "-c",
       "sleep 300 & echo $! > " + pids + "$KOLO_RANK; echo \"token=[$KOLO_LAUNCHER_TOKEN]\""});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] token=[]", "[1] token=[]"})) << r.out;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream f(pids + std::to_string(rank));
    pid_t pid = 0;
    ASSERT_TRUE(f >> pid) << "rank " << rank << " wrote no pid";
    bool gone = false;
    for (int i = 0; i < 50 && !gone; ++i) {  // up to 5 s
      gone = ::kill(pid, 0) != 0 && errno == ESRCH;
      if (!gone) ::usleep(100000);
    }
    if (!gone) ::kill(pid, SIGKILL);
    EXPECT_TRUE(gone) << "rank " << rank << "'s background sleep (pid " << pid
                      << ") outlived the job";
    std::remove((pids + std::to_string(rank)).c_str());
  }
  ::rmdir(dir);
}

// Pids of the processes whose command line is exactly `argv` (from /proc/*/cmdline).
std::vector<pid_t> processes_running(const std::vector<std::string>& argv) {
  std::string want;
  for (const auto& a : argv) want += a + '\0';
  std::vector<pid_t> pids;
  DIR* proc = ::opendir("/proc");
  if (!proc) return pids;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::stringstream cmdline;
    cmdline << f.rdbuf();
    if (cmdline.str() == want) pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return pids;
}

// A daemon the program starts with setsid() leaves the worker's process group; it still
// ends with the job (the shim is its sub-reaper). The sleep's argument is unique to this
// test run, so that the check finds only these processes.
TEST(Kolorun, ADaemonTheProgramStartsDoesNotOutliveTheJob) {
  const std::string seconds = "301." + std::to_string(::getpid());
  RunResult r =
      run_kolorun({"--mpi", "-np", "2", "sh", "-c", "setsid sleep " + seconds + " & exit 0"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<pid_t> left = processes_running({"sleep", seconds});
  for (int i = 0; i < 20 && !left.empty(); ++i) {  // kolorun is gone; allow 2 s
    ::usleep(100000);
    left = processes_running({"sleep", seconds});
  }
  for (pid_t pid : left) ::kill(pid, SIGKILL);
  EXPECT_TRUE(left.empty()) << left.size() << " 'sleep " << seconds << "' outlived the job";
}

TEST(Kolorun, AFailingWorkerStopsTheOthersAfterTheGracePeriod) {
  // Rank 1 fails at once; the others would sleep for a minute.
  RunResult r = run_kolorun({"--mpi", "-np", "3", "--grace-seconds", "1", "sh", "-c",
                             "if [ $KOLO_RANK = 1 ]; then echo failing >&2; exit 3; fi; "
                             "sleep 60"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_LT(r.seconds, 15) << r.err;
  EXPECT_TRUE(contains(r.err, "[1] failing")) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 1 (host ")) << r.err;
  EXPECT_TRUE(contains(r.err, ") exited with status 3")) << r.err;
  EXPECT_FALSE(contains(r.err, "KOLO_LAUNCHER_EVENT")) << r.err;
}

TEST(Kolorun, WhenEveryWorkerFailedItDoesNotWaitForTheGracePeriod) {
  RunResult r = run_kolorun({"--mpi", "-np", "2", "--grace-seconds", "30", "sh", "-c", "exit 1"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_LT(r.seconds, 10) << r.err;
}

TEST(Kolorun, AWorkerKilledBySignalIsReported) {
  RunResult r = run_kolorun({"--mpi", "-np", "2", "--grace-seconds", "1", "sh", "-c",
                             "if [ $KOLO_RANK = 1 ]; then kill -9 $$; fi; sleep 60"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 128 + 9) << r.err;
  EXPECT_LT(r.seconds, 15) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 1 (host ")) << r.err;
  EXPECT_TRUE(contains(r.err, ") was killed by signal 9 (Killed)")) << r.err;
}

// A scratch directory for one test's files; removed with what is in it.
class ScratchDir {
 public:
  ScratchDir() {
    char path[] = "/tmp/kolorun_test_XXXXXX";
    if (::mkdtemp(path) != nullptr) path_ = path;
  }
  ~ScratchDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }
  // The number in `name` once it exists (written with mv, so never half-written), or 0
  // after `timeout_s`.
  pid_t read_pid(const std::string& name, double timeout_s) const {
    for (int i = 0; i < timeout_s * 100; ++i) {
      std::ifstream f(path_ + "/" + name);
      pid_t pid = 0;
      if (f >> pid) return pid;
      ::usleep(10000);
    }
    return 0;
  }
  void touch(const std::string& name) const { std::ofstream(path_ + "/" + name) << "\n"; }

 private:
  std::string path_;
};

// Issue 11: when rank 1 is killed, rank 0 notices and exits with status 1, and its report
// reaches kolorun first (here rank 1's own report is held back until rank 0 has exited,
// by a background process that keeps rank 1's output open). The cause is still rank 1.
TEST(Kolorun, TheRankThatDiedIsBlamedNotTheSurvivorThatReportedFirst) {
  ScratchDir dir;
  const std::string d = dir.path();
  const std::string script =
      "if [ $KOLO_RANK = 1 ]; then"
      "  ( while [ ! -e " +
      d +
      "/noticed ]; do sleep 0.01; done; sleep 0.3 ) &"
      "  echo $$ > " +
      d + "/pid.tmp && mv " + d + "/pid.tmp " + d +
      "/pid; kill -9 $$; "
      "fi; "
      "while [ ! -e " +
      d + "/pid ]; do sleep 0.01; done; p=$(cat " + d +
      "/pid); "
      "while kill -0 $p 2>/dev/null; do sleep 0.01; done; "
      "echo 'rank 1 is gone' >&2; touch " +
      d + "/noticed; exit 1";
  RunResult r = run_kolorun({"--mpi", "-np", "2", "--grace-seconds", "1", "sh", "-c", script});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_TRUE(contains(r.err, "[0] rank 1 is gone")) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 1 (host ")) << r.err;
  EXPECT_TRUE(contains(r.err, ") was killed by signal 9 (Killed)")) << r.err;
  EXPECT_FALSE(contains(r.err, "kolorun: rank 0")) << r.err;
}

// A signal from outside the job to one worker's `kolorun --worker-shim` (not to its
// program) is that worker's failure, even though the survivors, which notice its program
// gone (here: told by the test), exit with status 1 first, and mpirun then stops the rest.
class KolorunShimSignal : public ::testing::TestWithParam<int> {};

TEST_P(KolorunShimSignal, IsBlamedOnThatWorker) {
  const int sig = GetParam();
  ScratchDir dir;
  const std::string d = dir.path();
  const std::string script =
      "if [ $KOLO_RANK = 1 ]; then"
      "  echo $PPID > " +
      d + "/shim.tmp && mv " + d + "/shim.tmp " + d +
      "/shim; exec sleep 30; "
      "fi; "
      "while [ ! -e " +
      d + "/gone ]; do sleep 0.01; done; echo 'rank 1 is gone' >&2; exit 1";
  KolorunProcess p({"--mpi", "-np", "3", "--grace-seconds", "1", "sh", "-c", script});
  const pid_t shim = dir.read_pid("shim", 20);
  ASSERT_GT(shim, 0) << "rank 1 did not start";
  ::kill(shim, sig);
  dir.touch("gone");
  RunResult r = p.wait(30);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 128 + sig) << r.err;
  // Which mpirun reports first is a race on a loaded machine: the shim's signal (kolorun
  // then gives the host and the signal), or the survivors' exit status 1, after which
  // mpirun stops the shim without saying how it ended (kolorun then says the shim ended
  // without reporting). Either way rank 1 is blamed and the status is its signal's.
  const bool detailed = contains(r.err, "kolorun: rank 1 (host ");
  const bool unreported = contains(r.err,
                                   "kolorun: rank 1: its worker shim ended without reporting "
                                   "(it was killed?)");
  EXPECT_TRUE(detailed || unreported) << r.err;
  if (detailed && sig == SIGKILL) {
    EXPECT_TRUE(contains(r.err,
                         ": its worker shim was killed by signal 9 (Killed) before it "
                         "reported"))
        << r.err;
  } else if (detailed) {
    EXPECT_TRUE(contains(r.err,
                         ") was killed by signal 15 (Terminated) after it was stopped "
                         "from outside the job"))
        << r.err;
  }
  EXPECT_FALSE(contains(r.err, "kolorun: rank 0")) << r.err;
  EXPECT_FALSE(contains(r.err, "kolorun: rank 2")) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Signals, KolorunShimSignal, ::testing::Values(SIGTERM, SIGKILL),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == SIGKILL ? std::string("SIGKILL")
                                                        : std::string("SIGTERM");
                         });

TEST(Kolorun, SigintStopsTheJob) {
  KolorunProcess p({"--mpi", "-np", "2", "sh", "-c", "echo ready; sleep 60"});
  ASSERT_TRUE(p.wait_for_lines("ready", 2, 20)) << p.out();
  const auto start = std::chrono::steady_clock::now();
  ::kill(p.pid(), SIGINT);
  RunResult r = p.wait(20);
  const double stop_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_LT(stop_s, 8) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: received SIGINT")) << r.err;
}

// A killed kolorun takes mpirun with it, even an mpirun that ignores the SIGTERM it then
// gets (OpenMPI's does when it is stuck, e.g. out of pipes). Here "mpirun" is a script
// first on PATH that ignores SIGTERM.
TEST(Kolorun, AKilledKolorunLeavesNoMpirunBehind) {
  ScratchDir dir;
  const std::string d = dir.path();
  {
    std::ofstream f(d + "/mpirun");
    // It shows itself 0.3 s after it starts: kolorun starts its guard right after
    // mpirun, and a kill within those microseconds is not what this test is about.
    f << "#!/bin/sh\ntrap '' TERM\nsleep 0.3\necho $$ > " << d << "/pid.tmp && mv " << d
      << "/pid.tmp " << d << "/pid\nwhile :; do sleep 0.1; done\n";
  }
  ASSERT_EQ(::chmod((d + "/mpirun").c_str(), 0755), 0);
  const char* path = std::getenv("PATH");
  KolorunProcess p({"--mpi", "-np", "2", "true"},
                   {{"PATH", d + ":" + (path ? path : "/usr/bin:/bin")}});
  const pid_t mpirun = dir.read_pid("pid", 20);
  ASSERT_GT(mpirun, 0) << "the stand-in mpirun did not start";
  ::kill(p.pid(), SIGKILL);
  p.wait(10);
  bool gone = false;
  for (int i = 0; i < 150 && !gone; ++i) {  // the guard waits 5 s after its SIGTERM
    // Gone, or a zombie that init has yet to reap.
    std::ifstream stat("/proc/" + std::to_string(mpirun) + "/stat");
    std::string pid_field, comm, state;
    gone = !(stat >> pid_field >> comm >> state) || state == "Z";
    if (!gone) ::usleep(100000);
  }
  if (!gone) ::kill(mpirun, SIGKILL);
  EXPECT_TRUE(gone) << "mpirun (pid " << mpirun << ") outlived the killed kolorun";
}

// The pid of `parent`'s child whose command name is `comm`, or 0.
pid_t child_named(pid_t parent, const std::string& comm) {
  DIR* proc = ::opendir("/proc");
  if (!proc) return 0;
  pid_t found = 0;
  while (const dirent* e = ::readdir(proc)) {
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string pid, name, state;
    long ppid = 0;
    if (stat >> pid >> name >> state >> ppid && ppid == parent && name == "(" + comm + ")") {
      found = static_cast<pid_t>(std::atol(pid.c_str()));
    }
  }
  ::closedir(proc);
  return found;
}

// OpenMPI's shared-memory segment files (vader_segment.*) are left in /dev/shm when
// mpirun is killed; kolorun removes this job's (and only this job's: they are in a
// directory of its own). The MPI program prints the segment files it mapped.
TEST(Kolorun, AKilledMpirunLeavesNoSharedMemoryFiles) {
#ifndef KOLO_MPI_IDLE
  GTEST_SKIP() << "built without MPI";
#else
  KolorunProcess p({"--mpi", "-np", "2", KOLO_MPI_IDLE});
  ASSERT_TRUE(p.wait_for_lines("ready", 2, 20)) << p.out();
  std::vector<std::string> segments;
  for (const auto& line : lines_of(p.out())) {
    const size_t at = line.find("] segment ");
    if (at != std::string::npos) segments.push_back(line.substr(at + 10));
  }
  ASSERT_FALSE(segments.empty()) << p.out();
  for (const auto& path : segments) EXPECT_EQ(::access(path.c_str(), F_OK), 0) << path;
  const pid_t mpirun = child_named(p.pid(), "mpirun");
  ASSERT_GT(mpirun, 0);
  ::kill(mpirun, SIGKILL);
  RunResult r = p.wait(20);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0) << r.err;
  for (const auto& path : segments) {
    const bool left = ::access(path.c_str(), F_OK) == 0;
    if (left) std::remove(path.c_str());
    EXPECT_FALSE(left) << path << " outlived the job";
  }
#endif
}

TEST(Kolorun, HelpListsEveryVariableWithItsDefault) {
  RunResult r = run_kolorun({"--mpi", "--help"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const auto* table : {&core::config_options(), &core::launcher_variables()}) {
    for (const auto& v : *table) {
      const std::string value = *v.default_value ? v.default_value : "unset";
      EXPECT_TRUE(contains(r.out, std::string(v.name) + " (default: " + value + ")")) << v.name;
    }
  }
  for (const char* option : {"--np", "-H,--hosts", "--hostfile", "--mpi", "--grace-seconds",
                             "stopped (default: 5)", "--dry-run"}) {
    EXPECT_TRUE(contains(r.out, option)) << option;
  }
}

TEST(Kolorun, RunsTheWorkersAHostfileAllows) {
  const std::string path = ::testing::TempDir() + "kolorun_test_hostfile";
  {
    std::ofstream f(path);
    f << "# this machine\nlocalhost slots=3\n";
  }
  RunResult r = run_kolorun(
      {"--mpi", "-np", "3", "--hostfile", path, "sh", "-c", "echo $KOLO_RANK $KOLO_LOCAL_SIZE"});
  std::remove(path.c_str());
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] 0 3", "[1] 1 3", "[2] 2 3"}))
      << r.out;
}

TEST(Kolorun, MoreWorkersThanSlotsIsAClearError) {
  RunResult r = run_kolorun({"--mpi", "-np", "3", "-H", "localhost:2", "true"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "-np 3 needs 3 slots but -H localhost:2 has 2")) << r.err;
}

// mpirun does not fail when it runs out of descriptors for its workers' pipes: it hangs
// for good. kolorun refuses such a job up front, saying which limit and what to do.
TEST(Kolorun, RefusesMoreWorkersThanTheOpenFileLimitAllows) {
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 256);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);  // kolorun inherits it
  RunResult r = run_kolorun({"--mpi", "-np", "60", "true"}, 20);
  // Under the low limit too, so that without the check mpirun would stop after a few
  // dozen workers instead of starting thousands.
  RunResult huge = run_kolorun({"--mpi", "-np", "100000", "true"}, 20);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "the open-file limit (ulimit -n) is 256")) << r.err;
  EXPECT_TRUE(contains(r.err, "lower -np")) << r.err;

  r = huge;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun starts at most 4096 on one host")) << r.err;
}

TEST(Kolorun, DryRunPrintsTheMpirunCommandWithTheHosts) {
  RunResult r =
      run_kolorun({"--mpi", "--dry-run", "-np", "4", "-H", "a:2,b:2", "./train", "--lr", "0.1"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "mpirun ")) << r.out;
  EXPECT_TRUE(contains(r.out, " -np 4 ")) << r.out;
  EXPECT_TRUE(contains(r.out, " --host a:2,b:2 ")) << r.out;
  EXPECT_TRUE(contains(r.out, "KOLO_HOST_SLOTS=2,2")) << r.out;
  EXPECT_TRUE(contains(r.out, "--worker-shim")) << r.out;
  EXPECT_TRUE(contains(r.out, "-- ./train --lr 0.1")) << r.out;
}

TEST(Kolorun, AProgramThatCannotRunFailsTheWorker) {
  RunResult r = run_kolorun({"--mpi", "-np", "2", "--grace-seconds", "1", "/nonexistent/prog"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 127) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot run '/nonexistent/prog'")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with status 127")) << r.err;
}

TEST(Kolorun, WithoutMpirunItSaysWhatToInstall) {
  RunResult r = run_kolorun({"--mpi", "-np", "2", "true"}, 30, {{"PATH", "/nonexistent"}});
  EXPECT_NE(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "'mpirun'")) << r.err;
  EXPECT_TRUE(contains(r.err, "openmpi-bin")) << r.err;
}

TEST(Kolorun, UsageErrors) {
  EXPECT_EQ(run_kolorun({"--mpi", "-np", "2"}).status, 2);
  EXPECT_EQ(run_kolorun({"--mpi", "true"}).status, 2);
  EXPECT_EQ(run_kolorun({"--mpi", "-np", "0", "true"}).status, 2);
  RunResult r = run_kolorun({"--mpi", "-np", "1", "-H", "a:2,,b", "true"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "empty entry")) << r.err;
  r = run_kolorun({"--mpi", "-np", "1", "-H", "", "true"});  // e.g. -H "$HOSTS" with HOSTS unset
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "-H: ")) << r.err;
}

}  // namespace
}  // namespace kolo::launcher::testing
