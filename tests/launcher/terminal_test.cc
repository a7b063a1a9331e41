// Multi-process tests of kolorun on a terminal: the real kolorun runs with its stdout,
// stderr and stdin on a pseudo-terminal (forkpty, raw mode so that "\n" stays "\n"), and
// a shell worker redraws a line in place with "\r", as a progress bar does. kolorun must
// give every worker KOLO_TERMINAL=1 and show the updates as they come ("\r[rank] text"
// then erase-to-end-of-line), through its own launcher, the ssh wrapper (a stand-in ssh
// that runs the command here) and mpirun's shims; and when its stdout is a file, only
// the last update of the line, as a line.
//
// Each run is bounded (the pty is read with a deadline; kolorun is killed past it).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

#include "run_kolorun.h"

namespace kolo::launcher::testing {
namespace {

// Rank 0 prints its terminal variable, then draws "i/3 [bar]" three times in place (0.2 s
// apart) and ends the line as "3/3 done"; rank 1 prints a line in the middle of that.
const char* kBarWorker =
    "if [ $KOLO_RANK = 0 ]; then echo T=$KOLO_TERMINAL; for i in 1 2 3; do "
    "printf '\\r%d/3 [bar]' $i; sleep 0.2; done; printf '\\r3/3 done\\n'; "
    "else sleep 0.3; echo hello; fi";

struct PtyResult {
  int status = -1;
  bool timed_out = false;
  std::string out;  // everything kolorun wrote to the terminal
};

// Runs kolorun on a pseudo-terminal; `env` entries are set (an empty value unsets).
PtyResult run_on_pty(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env, double timeout_s) {
  std::vector<std::string> argv = {KOLORUN_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  struct termios raw = {};
  ::cfmakeraw(&raw);
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, &raw, nullptr);
  if (pid == 0) {
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::unsetenv("KOLO_TERMINAL");
    for (const auto& [name, value] : env) {
      if (value.empty()) {
        ::unsetenv(name.c_str());
      } else {
        ::setenv(name.c_str(), value.c_str(), 1);
      }
    }
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  PtyResult r;
  if (pid < 0) return r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    struct pollfd p = {master, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO: every process that had the terminal open is gone
    r.out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string visible(const std::string& s) {
  std::string v;
  for (char c : s) {
    if (c == '\r') {
      v += "\\r";
    } else if (c == '\x1b') {
      v += "\\e";
    } else {
      v += c;
    }
  }
  return v;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What every path must show on the terminal for kBarWorker.
void expect_bar_in_place(const PtyResult& r) {
  ASSERT_FALSE(r.timed_out) << visible(r.out);
  EXPECT_EQ(r.status, 0) << visible(r.out);
  EXPECT_TRUE(contains(r.out, "[0] T=1\n")) << visible(r.out);
  // Shown as they came, in place, with the rank in front. (Updates 0.2 s apart are read
  // one by one unless the machine is very busy: at least one of them must show.)
  int in_place = 0;
  for (const char* update :
       {"\r[0] 1/3 [bar]\x1b[K", "\r[0] 2/3 [bar]\x1b[K", "\r[0] 3/3 [bar]\x1b[K"}) {
    in_place += contains(r.out, update) ? 1 : 0;
  }
  EXPECT_GE(in_place, 1) << visible(r.out);
  // The final text in place of the bar, or, when rank 1's line came between the last
  // update and it (timing: seen once under ASan through the ssh wrapper), on a line of
  // its own after the bar's line was ended.
  EXPECT_TRUE(contains(r.out, "\r[0] 3/3 done\x1b[K\n") || contains(r.out, "\n[0] 3/3 done\n"))
      << visible(r.out);
  // Rank 1's line starts a line of its own, never glued to rank 0's update.
  const size_t hello = r.out.find("[1] hello\n");
  ASSERT_NE(hello, std::string::npos) << visible(r.out);
  EXPECT_TRUE(hello == 0 || r.out[hello - 1] == '\n') << visible(r.out);
}

class ScratchDir {
 public:
  ScratchDir() {
    char path[] = "/tmp/kolorun_tty_XXXXXX";
    if (::mkdtemp(path) != nullptr) path_ = path;
  }
  ~ScratchDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  // A stand-in ssh first on PATH: skips its options up to "--", then the host, and runs
  // the remote command here.
  std::map<std::string, std::string> fake_ssh_env() const {
    const std::string ssh = path_ + "/ssh";
    std::ofstream(ssh) << "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nshift\n"
                          "exec sh -c \"$1\"\n";
    ::chmod(ssh.c_str(), 0755);
    const char* path = std::getenv("PATH");
    return {{"PATH", path_ + ":" + (path ? path : "/usr/bin:/bin")}};
  }

 private:
  std::string path_;
};

TEST(Terminal, OwnLauncherShowsARanksUpdatesInPlace) {
  expect_bar_in_place(run_on_pty({"-np", "2", "sh", "-c", kBarWorker}, {}, 20));
}

TEST(Terminal, UpdatesComeThroughTheSshWrapper) {
  ScratchDir dir;
  expect_bar_in_place(run_on_pty(
      {"-H", "hostb:2", "--rendezvous-addr", "127.0.0.1", "-np", "2", "sh", "-c", kBarWorker},
      dir.fake_ssh_env(), 20));
}

TEST(Terminal, UpdatesComeThroughMpirunsShims) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  expect_bar_in_place(run_on_pty({"--mpi", "-np", "2", "sh", "-c", kBarWorker}, {}, 30));
}

TEST(Terminal, KoloTerminalZeroTurnsItOff) {
  const PtyResult r =
      run_on_pty({"-np", "2", "sh", "-c", kBarWorker}, {{"KOLO_TERMINAL", "0"}}, 20);
  ASSERT_FALSE(r.timed_out) << visible(r.out);
  EXPECT_TRUE(contains(r.out, "[0] T=0\n")) << visible(r.out);
  EXPECT_FALSE(contains(r.out, "\r")) << visible(r.out);
  EXPECT_TRUE(contains(r.out, "[0] 3/3 done\n")) << visible(r.out);
}

// Not a terminal: KOLO_TERMINAL=0 for the workers (their stdout is a pseudo-terminal
// either way), and a redrawn line becomes its last update, on every path.
TEST(Terminal, ToAFileOnlyTheLastUpdateOfARedrawnLineIsALine) {
  ScratchDir dir;
  auto env = dir.fake_ssh_env();
  env["KOLO_TERMINAL"] = "";
  std::vector<std::vector<std::string>> paths = {
      {"-np", "2"}, {"-H", "hostb:2", "--rendezvous-addr", "127.0.0.1", "-np", "2"}};
  if (std::system("command -v mpirun >/dev/null 2>&1") == 0) paths.push_back({"--mpi", "-np", "2"});
  for (auto args : paths) {
    args.insert(args.end(), {"sh", "-c", kBarWorker});
    const RunResult r = run_kolorun(args, 30, env);
    ASSERT_EQ(r.status, 0) << args[0] << ": " << r.err;
    std::vector<std::string> lines = lines_of(r.out);
    std::sort(lines.begin(), lines.end());
    EXPECT_EQ(lines, (std::vector<std::string>{"[0] 3/3 done", "[0] T=0", "[1] hello"}))
        << args[0] << ": " << visible(r.out);
  }
}

}  // namespace
}  // namespace kolo::launcher::testing
