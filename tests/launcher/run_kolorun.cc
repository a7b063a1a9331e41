// Starting kolorun from the multi-process tests (see run_kolorun.h).
#include "run_kolorun.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace kolo::launcher::testing {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_path(const char* what) {
  static int counter = 0;
  return ::testing::TempDir() + "kolorun_test_" + std::to_string(::getpid()) + "_" +
         std::to_string(counter++) + "." + what;
}

}  // namespace

KolorunProcess::KolorunProcess(const std::vector<std::string>& args,
                               const std::map<std::string, std::string>& env) {
  out_path_ = temp_path("out");
  err_path_ = temp_path("err");
  std::vector<std::string> argv = {KOLORUN_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  std::map<std::string, std::string> vars;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) vars[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  // Set, so that kolorun's line about the default (src/launcher/threads.h) stays out of
  // the outputs the tests compare; a test of that line removes it through `env`.
  vars.emplace("OMP_NUM_THREADS", "1");
  for (const auto& [k, v] : env) {
    if (v.empty()) {
      vars.erase(k);
    } else {
      vars[k] = v;
    }
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
  std::vector<char*> cenv;
  for (auto& s : env_strings) cenv.push_back(s.data());
  cenv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so that a timeout can kill kolorun without killing the test.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  started_ = now_s();
  if (posix_spawn(&pid_, cargv[0], &actions, &attr, cargv.data(), cenv.data()) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
}

KolorunProcess::~KolorunProcess() {
  if (pid_ > 0 && !waited_) wait(0);
  std::remove(out_path_.c_str());
  std::remove(err_path_.c_str());
}

std::string KolorunProcess::out() const { return read_file(out_path_); }

bool KolorunProcess::wait_for_lines(const std::string& text, int count, double timeout_s) const {
  const double deadline = now_s() + timeout_s;
  while (now_s() < deadline) {
    int n = 0;
    for (const auto& line : lines_of(out())) n += line.find(text) != std::string::npos;
    if (n >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

RunResult KolorunProcess::wait(double timeout_s) {
  RunResult r;
  if (pid_ <= 0) {
    r.err = "could not start " KOLORUN_PATH;
    return r;
  }
  const double deadline = now_s() + timeout_s;
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid_, &status, WNOHANG);
    if (w == pid_) break;
    if (now_s() >= deadline) {
      r.timed_out = true;
      ::kill(-pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  waited_ = true;
  r.seconds = now_s() - started_;
  r.status = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  r.out = read_file(out_path_);
  r.err = read_file(err_path_);
  return r;
}

RunResult run_kolorun(const std::vector<std::string>& args, double timeout_s,
                      const std::map<std::string, std::string>& env) {
  KolorunProcess p(args, env);
  return p.wait(timeout_s);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream s(text);
  std::string line;
  while (std::getline(s, line)) lines.push_back(line);
  return lines;
}

}  // namespace kolo::launcher::testing
