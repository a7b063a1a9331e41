// Multi-process tests of kolorun's own launcher (the default; src/launcher/job.h): real
// kolorun, no mpirun, shell and launcher_worker.cc workers. Other hosts are played by a
// stand-in `ssh` first on PATH that runs the remote command here with sh, so the whole
// remote path (quoting, secrets on stdin, the --remote-worker wrapper, its exit marker)
// runs without an sshd; a real ssh to localhost is tried only where an sshd listens.
//
// Each test bounds its run time (RunKolorun kills kolorun past its limit).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "launcher_test_util.h"
#include "run_kolorun.h"

namespace kolo::launcher::testing {
namespace {

std::multiset<std::string> line_set(const std::string& text) {
  auto lines = lines_of(text);
  return {lines.begin(), lines.end()};
}

// A PATH with sh (and the tools the tests' scripts use) but no mpirun.
std::string path_without_mpirun(const ScratchDir& dir) {
  const std::string bin = dir.path() + "/bin";
  ::mkdir(bin.c_str(), 0755);
  for (const char* tool : {"sh", "sleep", "cat", "kill"}) {
    for (const char* at : {"/bin/", "/usr/bin/"}) {
      const std::string target = std::string(at) + tool;
      if (::access(target.c_str(), X_OK) == 0) {
        ::symlink(target.c_str(), (bin + "/" + tool).c_str());
        break;
      }
    }
  }
  return bin;
}

TEST(OwnLauncher, RunsWithoutMpirunAndPrefixesEachWorkersLines) {
  ScratchDir dir;
  RunResult r = run_kolorun({"-np", "3", "sh", "-c", "echo $KOLO_RANK"}, 20,
                            {{"PATH", path_without_mpirun(dir)}});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{"[0] 0", "[1] 1", "[2] 2"})) << r.out;
}

TEST(OwnLauncher, KeepsStdoutAndStderrApartAndFlushesALastLineWithoutNewline) {
  RunResult r = run_kolorun(
      {"-np", "2", "sh", "-c", "echo out $KOLO_RANK; echo err $KOLO_RANK >&2; printf tail"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(line_set(r.out),
            (std::multiset<std::string>{"[0] out 0", "[1] out 1", "[0] tail", "[1] tail"}))
      << r.out;
  EXPECT_EQ(line_set(r.err), (std::multiset<std::string>{"[0] err 0", "[1] err 1"})) << r.err;
}

// A worker's stdout is a terminal, as under mpirun, so that the C library line-buffers
// printf (with a pipe, a program's lines came all at once at its exit); raw, so that lines
// keep "\n" alone; its stderr stays a pipe, apart.
TEST(OwnLauncher, AWorkersStdoutIsATerminalItsStderrAPipe) {
  RunResult r = run_kolorun({"-np", "2", "sh", "-c",
                             "if test -t 1; then echo tty; else echo pipe; fi; "
                             "if test -t 2; then echo tty >&2; else echo pipe >&2; fi; "
                             "printf 'a\\nb\\n'"});
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(line_set(r.out),
            (std::multiset<std::string>{"[0] tty", "[1] tty", "[0] a", "[1] a", "[0] b", "[1] b"}))
      << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_EQ(line_set(r.err), (std::multiset<std::string>{"[0] pipe", "[1] pipe"})) << r.err;
}

// Issue 13: mpirun splices long lines of different workers; kolorun reads each worker's
// own pipe and writes every line whole, in one write().
TEST(OwnLauncher, LongLinesFromFourWorkersNeverSplice) {
  constexpr int kLines = 2000, kBytes = 10240;
  RunResult r = run_kolorun(
      {"-np", "4", KOLO_LAUNCHER_WORKER, "lines", std::to_string(kLines), std::to_string(kBytes)},
      30);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  int per_rank[4] = {};
  int bad = 0;
  for (const auto& line : lines_of(r.out)) {
    // "[R] R:I:" then 'a'+R up to kBytes.
    const int rank = line.size() > 4 ? line[1] - '0' : -1;
    bool ok =
        rank >= 0 && rank < 4 && line.size() == 4 + static_cast<size_t>(kBytes) &&
        line.compare(0, 6, "[" + std::to_string(rank) + "] " + std::to_string(rank) + ":") == 0 &&
        line.find_first_not_of(static_cast<char>('a' + rank), line.find(':', 6) + 1) ==
            std::string::npos;
    if (ok) {
      ++per_rank[rank];
    } else if (++bad < 3) {
      ADD_FAILURE() << "spliced or cut line: " << line.substr(0, 80) << "... (" << line.size()
                    << " bytes)";
    }
  }
  EXPECT_EQ(bad, 0);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(per_rank[rank], kLines) << "rank " << rank;
}

// The resident memory (kB) of `pid`, from /proc.
long rss_kb(pid_t pid) {
  long kb = 0;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) kb = std::atol(line.c_str() + 6);
  }
  return kb;
}

// Issue 36: output nobody reads (kolorun's stdout a pipe whose reader stalls) must not
// pile up in memory. Under kolorun's own launcher a full stdout stops kolorun's reading,
// and the workers wait in their writes, as they would on a slow terminal; once the reader
// goes on, every line arrives, in order. (Under --mpi, mpirun's own forwarding buffers
// without bound: docs/launcher.md.)
TEST(OwnLauncher, UnreadOutputWaitsInTheWorkersNotInMemoryAndNothingIsLost) {
  constexpr int kLines = 1500000;  // about 10 MB from each worker
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    ::setpgid(0, 0);
    const std::string seq = "seq 1 " + std::to_string(kLines);
    ::execl(KOLORUN_PATH, KOLORUN_PATH, "-np", "2", "sh", "-c", seq.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  // Nobody reads: once output is waiting (the workers run) and a moment more (the pipes
  // are full), two more seconds of workers trying to write (mpirun's forwarding grew by
  // 1.3 GB in that time). kolorun's own memory is what must not grow.
  pollfd ready{out[0], POLLIN, 0};
  ASSERT_EQ(::poll(&ready, 1, 20000), 1) << "no output in 20 s";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long before = rss_kb(pid);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const long stalled = rss_kb(pid);
  // Then everything is read: both workers' lines, whole and in order.
  std::string text;
  char buf[1 << 16];
  const auto by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < by) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  int status = -1;
  if (std::chrono::steady_clock::now() >= by) ::kill(-pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(stalled - before, 8 * 1024)
      << "kolorun grew from " << before << " kB to " << stalled << " kB while unread";
  int next[2] = {1, 1};
  std::size_t bad = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const int rank = line.rfind("[0] ", 0) == 0 ? 0 : line.rfind("[1] ", 0) == 0 ? 1 : -1;
    if (rank >= 0 && line.substr(4) == std::to_string(next[rank])) {
      ++next[rank];
    } else if (++bad < 3) {
      ADD_FAILURE() << "unexpected line: " << line.substr(0, 80);
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(next[0] - 1, kLines);
  EXPECT_EQ(next[1] - 1, kLines);
}

TEST(OwnLauncher, EveryWorkerGetsItsVariables) {
  RunResult r =
      run_kolorun({"-np", "3", "-H", "localhost:2,127.0.0.1:1", "sh", "-c",
                   "echo $KOLO_RANK $KOLO_SIZE $KOLO_LOCAL_RANK $KOLO_LOCAL_SIZE $KOLO_CROSS_RANK "
                   "$KOLO_CROSS_SIZE $KOLO_HOST_SLOTS $KOLO_HOST_ADDR ${#KOLO_RENDEZVOUS_SECRET} "
                   "${KOLO_RENDEZVOUS_ADDR%:*}"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(line_set(r.out), (std::multiset<std::string>{
                                 "[0] 0 3 0 2 0 2 2,1 127.0.0.1 32 127.0.0.1",
                                 "[1] 1 3 1 2 0 1 2,1 127.0.0.1 32 127.0.0.1",
                                 "[2] 2 3 0 1 1 2 2,1 127.0.0.1 32 127.0.0.1",
                             }))
      << r.out;
}

TEST(OwnLauncher, WorkersReachTheStoreAndTheSecretIsInNoCommandLine) {
  RunResult r = run_kolorun({"-np", "3", KOLO_LAUNCHER_WORKER, "store"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "] store ok"), 3) << r.out << r.err;
  r = run_kolorun({"-np", "2", KOLO_LAUNCHER_WORKER, "argv_scan"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "] secret in argv of 0 processes"), 2) << r.out << r.err;
}

TEST(OwnLauncher, AWorkersEndIsPublishedInTheStore) {
  // Rank 2 exits with status 5 (a shell), or is killed by SIGKILL; the others read it.
  for (const auto& [how, text] : std::vector<std::pair<std::string, std::string>>{
           {"exit 5", "rank 2 (host localhost) exited with status 5"},
           {"kill -9 $$", "rank 2 (host localhost) was killed by signal 9 (SIGKILL)"}}) {
    RunResult r = run_kolorun({"-np", "3", "--grace-seconds", "5", "sh", "-c",
                               "if [ $KOLO_RANK = 2 ]; then " + how + "; fi; exec " +
                                   std::string(KOLO_LAUNCHER_WORKER) + " watch"},
                              20);
    ASSERT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.status, how == "exit 5" ? 5 : 137) << r.err;
    // Each survivor saw rank 2's end (and perhaps the other survivor's, if it ended first).
    EXPECT_EQ(count(r.out, ": " + text + "\n"), 2) << r.out << r.err;
    EXPECT_EQ(count(r.out, "] saw exits="), count(r.out, "\n")) << r.out;
    EXPECT_LT(r.seconds, 5) << "the survivors should have ended by themselves";
  }
}

TEST(OwnLauncher, AFailingWorkerIsNamedWithItsLastLinesAndTheOthersStopped) {
  RunResult r = run_kolorun({"-np", "3", "--grace-seconds", "1", "sh", "-c",
                             "if [ $KOLO_RANK = 1 ]; then echo about to fail; echo oops >&2; "
                             "exit 3; fi; sleep 30"},
                            20);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 1 (host localhost) exited with status 3\n")) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "kolorun: its last 2 lines (stdout and stderr):\n"
                       "kolorun:   [1] about to fail\nkolorun:   [1] oops\n"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "stopping the other workers in 1 s (--grace-seconds)")) << r.err;
  EXPECT_GT(r.seconds, 0.9);
  EXPECT_LT(r.seconds, 6) << r.err;
}

TEST(OwnLauncher, AWorkerKilledBySignalIsNamed) {
  RunResult r = run_kolorun({"-np", "2", "--grace-seconds", "1", "sh", "-c",
                             "if [ $KOLO_RANK = 0 ]; then sleep 0.2; kill -9 $$; fi; sleep 30"},
                            20);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 0 (host localhost) was killed by signal 9 (Killed)"))
      << r.err;
  EXPECT_LT(r.seconds, 6) << r.err;
}

TEST(OwnLauncher, AProgramThatCannotRunFailsTheJob) {
  RunResult r = run_kolorun({"-np", "2", "--grace-seconds", "1", "/nonexistent/prog"});
  EXPECT_EQ(r.status, 127) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot run '/nonexistent/prog'")) << r.err;
}

// Each worker prints its shell's pid and its background sleep's; returns them all.
std::vector<pid_t> wait_for_pids(const KolorunProcess& p, int workers) {
  if (!p.wait_for_lines("pids", workers, 20)) return {};
  std::vector<pid_t> pids;
  for (const auto& line : lines_of(p.out())) {
    std::istringstream words(line.substr(line.find("pids") + 4));
    pid_t a = 0, b = 0;
    if (words >> a >> b) pids.insert(pids.end(), {a, b});
  }
  return pids;
}

const char* kSleepers = "sleep 30 & echo pids $$ $!; wait";

TEST(OwnLauncher, SigintStopsEveryWorker) {
  KolorunProcess p({"-np", "2", "sh", "-c", kSleepers});
  const std::vector<pid_t> pids = wait_for_pids(p, 2);
  ASSERT_EQ(pids.size(), 4u) << p.out();
  ::kill(p.pid(), SIGINT);
  RunResult r = p.wait(20);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: received SIGINT, stopping the job")) << r.err;
  EXPECT_TRUE(gone_within(pids, 1)) << "a worker outlived kolorun";
}

TEST(OwnLauncher, AKilledKolorunLeavesNoWorkerRunning) {
  KolorunProcess p({"-np", "3", "sh", "-c", kSleepers});
  const std::vector<pid_t> pids = wait_for_pids(p, 3);
  ASSERT_EQ(pids.size(), 6u) << p.out();
  ::kill(p.pid(), SIGKILL);
  p.wait(10);
  const bool gone = gone_within(pids, 2);
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  EXPECT_TRUE(gone) << "a worker (or what it started) outlived the killed kolorun";
}

TEST(OwnLauncher, ADaemonAWorkerStartsDoesNotOutliveTheJob) {
  ScratchDir dir;
  RunResult r = run_kolorun(
      {"-np", "1", "sh", "-c", "setsid sleep 30 & echo $! > " + dir.path() + "/pid; exit 0"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream f(dir.path() + "/pid");
  pid_t pid = 0;
  ASSERT_TRUE(f >> pid);
  const bool gone = gone_within({pid}, 2);
  if (!gone) ::kill(pid, SIGKILL);
  EXPECT_TRUE(gone);
}

TEST(OwnLauncher, OtherHostsRunThroughSshAndTheRemoteWrapper) {
  ScratchDir dir;
  const auto env = fake_ssh_env(dir);
  const std::vector<std::string> hosts = {"-H", "localhost:1,hostb:2", "--rendezvous-addr",
                                          "127.0.0.1"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), hosts.begin(), hosts.end());
    return args;
  };
  RunResult r =
      run_kolorun(with({"-np", "3", "sh", "-c", "echo $KOLO_RANK $KOLO_HOST_ADDR"}), 20, env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(line_set(r.out),
            (std::multiset<std::string>{"[0] 0 127.0.0.1", "[1] 1 hostb", "[2] 2 hostb"}))
      << r.out << r.err;
  // The store is reached from "there", and the secret is on no command line there either.
  r = run_kolorun(with({"-np", "3", KOLO_LAUNCHER_WORKER, "store"}), 20, env);
  EXPECT_EQ(count(r.out, "] store ok"), 3) << r.out << r.err;
  r = run_kolorun(with({"-np", "3", KOLO_LAUNCHER_WORKER, "argv_scan"}), 20, env);
  EXPECT_EQ(count(r.out, "] secret in argv of 0 processes"), 3) << r.out << r.err;
  // A remote worker's signal comes back through its wrapper's marker (ssh would say 255).
  r = run_kolorun(with({"-np", "3", "--grace-seconds", "1", "sh", "-c",
                        "if [ $KOLO_RANK = 2 ]; then kill -9 $$; fi; sleep 30"}),
                  20, env);
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 2 (host hostb) was killed by signal 9")) << r.err;
  EXPECT_FALSE(contains(r.err, "KOLO_LAUNCHER_EVENT")) << r.err;
  EXPECT_LT(r.seconds, 8) << r.err;
}

// A stopped remote worker's last line, written after its program exited by something the
// program left holding its output, still arrives: the wrapper reads on for
// kRemoteDrainWhenStopped (event_loop.h; it was 0 s, and the wrapper SIGKILLed its group
// at once). The line waits for no clock: the background subshell writes it as soon as the
// wrapper has reaped the program (kill -0 on a zombie still succeeds), so without the
// drain it is lost every time, and with it the wrapper has 250 ms to spare for a few ms.
TEST(OwnLauncher, AStoppedRemoteWorkersLastLineAfterItsExitArrives) {
  ScratchDir dir;
  auto env = fake_ssh_env(dir);
  KolorunProcess p({"-H", "hostb:1", "--rendezvous-addr", "127.0.0.1", "-np", "1", "sh", "-c",
                    "trap '(while kill -0 $$ 2>/dev/null; do sleep 0.01; done; "
                    "echo after the exit >&2) & exit 0' TERM; echo ready; sleep 30 & wait"},
                   env);
  ASSERT_TRUE(p.wait_for_lines("[0] ready", 1, 20)) << p.out();
  ::kill(p.pid(), SIGTERM);  // kolorun closes ssh's stdin; the wrapper sends the SIGTERM
  RunResult r = p.wait(20);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_TRUE(contains(r.err, "[0] after the exit\n")) << r.err;
  EXPECT_FALSE(contains(r.err, "KOLO_LAUNCHER_EVENT")) << r.err;
  EXPECT_LT(r.seconds, 8) << r.err;
}

// Real ssh to this host, where an sshd listens and keys let us in (the lead's namespace
// hosts cover several hosts).
TEST(OwnLauncher, RealSshToLocalhost) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(22);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool listening = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  if (!listening || std::system("ssh -o BatchMode=yes -o ConnectTimeout=3 127.0.0.2 true "
                                ">/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no sshd on this host that lets us in without a password";
  }
  RunResult r = run_kolorun({"-H", "127.0.0.2:1,localhost:1", "--rendezvous-addr", "127.0.0.1",
                             "-np", "2", KOLO_LAUNCHER_WORKER, "store"},
                            30);
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(OwnLauncher, DryRunPrintsEachWorkersCommandWithoutTheSecret) {
  RunResult r = run_kolorun({"--dry-run", "-np", "2", "-H", "localhost:1,hostb:1",
                             "--rendezvous-addr", "10.0.0.1", "./train", "--lr", "0.1"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_TRUE(contains(lines[0], "[0] localhost: env ")) << lines[0];
  EXPECT_TRUE(contains(lines[0], " KOLO_RENDEZVOUS_ADDR=10.0.0.1:PORT ")) << lines[0];
  EXPECT_TRUE(contains(lines[0], " ./train --lr 0.1")) << lines[0];
  EXPECT_TRUE(contains(lines[1], "[1] hostb: ssh -o BatchMode=yes -- hostb 'cd ")) << lines[1];
  EXPECT_TRUE(contains(lines[1], " --remote-worker -- ./train --lr 0.1'")) << lines[1];
  EXPECT_FALSE(contains(r.out, "SECRET")) << r.out;
}

TEST(OwnLauncher, LauncherModeMpiSelectsMpirun) {
  RunResult r = run_kolorun({"--dry-run", "-np", "2", "true"}, 20, {{"KOLO_LAUNCHER_MODE", "mpi"}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("mpirun ", 0), 0u) << r.out;
  r = run_kolorun({"-np", "2", "true"}, 20, {{"KOLO_LAUNCHER_MODE", "ssh"}});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "KOLO_LAUNCHER_MODE=ssh is not valid")) << r.err;
}

}  // namespace
}  // namespace kolo::launcher::testing
