// Tests of kolorun's supervisor against a scripted stand-in for mpirun: a shell script
// that prints what mpirun would (the shims' exit markers, mpirun's own messages) in a
// fixed order, so that the choice of the failed worker is tested without races.
#include "launcher/supervisor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "launcher/events.h"

namespace kolo::launcher {
namespace {

constexpr const char* kToken = "f00d";

struct Outcome {
  int status = -1;
  std::string err;  // what the supervisor wrote to stderr
};

// Runs supervise() over `sh -c script` for `np` workers, capturing its stderr.
Outcome supervise_script(const std::string& script, int np) {
  SuperviseOptions o;
  o.mpirun_argv = {"sh", "-c", script};
  o.np = np;
  o.grace_seconds = 1;
  o.event_token = kToken;
  const std::string path = ::testing::TempDir() + "supervisor_test_" + std::to_string(::getpid());
  const int saved = ::dup(2);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(fd, 2);
  ::close(fd);
  Outcome out;
  out.status = supervise(o);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  out.err = text.str();
  std::remove(path.c_str());
  return out;
}

// A marker line as a shim writes it, for the script's `echo ... >&2`.
std::string marker(int rank, const std::string& fields) {
  return std::string("echo '") + kEventPrefix + "token=" + kToken +
         " rank=" + std::to_string(rank) + " host=vm " + fields + "' >&2; ";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const char* kAbortBanner =
    "echo 'Primary job  terminated normally, but 1 process returned' >&2; "
    "echo 'a non-zero exit code. Per user-direction, the job has been aborted.' >&2; ";

// The survivors' reports come first; rank 1's, killed by a signal, 0.3 s later. kolorun
// must not blame the first one; it stops the job (SIGTERM to "mpirun") once all are in.
TEST(Supervisor, WaitsForTheDeadRanksReportAndPrefersTheSignal) {
  Outcome r = supervise_script(marker(0, "exit=1 t=200") + marker(2, "exit=1 t=300") +
                                   "sleep 0.3; " + marker(1, "signal=9 t=100") +
                                   "trap 'exit 143' TERM; while :; do sleep 0.05; done",
                               3);
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 1 (host vm) was killed by signal 9 (Killed)"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "kolorun: rank 0")) << r.err;
}

// A shim killed with SIGKILL writes no marker; mpirun aborts the job, the others report,
// and mpirun names the process.
TEST(Supervisor, BlamesTheShimMpirunNames) {
  Outcome r = supervise_script(
      std::string(kAbortBanner) + marker(0, "exit=1") + marker(2, "signal=15 stopped=job") +
          "echo 'mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 "
          "(Killed).' >&2; exit 137",
      3);
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "kolorun: rank 1 (host vm): its worker shim was killed by signal 9 "
                       "(Killed) before it reported"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "kolorun: rank 0")) << r.err;
}

// The same when mpirun does not name it: the rank without a marker is the cause.
TEST(Supervisor, BlamesTheShimWithoutAMarkerWhenMpirunNamesNone) {
  Outcome r = supervise_script(
      std::string(kAbortBanner) + marker(0, "exit=1") + marker(2, "exit=1") + "exit 137", 3);
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: rank 1: its worker shim ended without reporting")) << r.err;
  EXPECT_FALSE(contains(r.err, "kolorun: rank 0")) << r.err;
}

// A worker whose shim was stopped from outside (not by mpirun) is the cause; the others,
// stopped by mpirun's abort, are not.
TEST(Supervisor, BlamesAWorkerStoppedFromOutside) {
  Outcome r =
      supervise_script(marker(0, "signal=15 stopped=job") + marker(1, "signal=15 stopped=outside") +
                           kAbortBanner + marker(2, "signal=15 stopped=job") + "exit 143",
                       3);
  EXPECT_EQ(r.status, 143) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "kolorun: rank 1 (host vm) was killed by signal 15 (Terminated) "
                       "after it was stopped from outside the job"))
      << r.err;
}

TEST(Supervisor, EveryWorkerSucceeding) {
  Outcome r = supervise_script(marker(0, "exit=0") + marker(1, "exit=0") + "exit 0", 2);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

}  // namespace
}  // namespace kolo::launcher
