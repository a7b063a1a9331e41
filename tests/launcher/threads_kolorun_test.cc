// kolorun's default OMP_NUM_THREADS (src/launcher/threads.h), through the real kolorun:
// unset, every worker gets cores / workers and kolorun says so once; set, it is left
// alone and nothing is said.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "launcher/threads.h"
#include "run_kolorun.h"

namespace kolo::launcher::testing {
namespace {

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(KolorunThreads, UnsetGivesEachWorkerItsShareAndOneNotice) {
  RunResult r = run_kolorun({"--mpi", "-np", "2", "sh", "-c", "echo threads=$OMP_NUM_THREADS"}, 30,
                            {{"OMP_NUM_THREADS", ""}});
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string want = "threads=" + std::to_string(std::max(1, usable_cores() / 2));
  EXPECT_EQ(count(r.out, want), 2) << r.out;
  EXPECT_EQ(count(r.err, "kolorun: OMP_NUM_THREADS is not set"), 1) << r.err;
  EXPECT_EQ(count(r.err, "workers)"), 1) << r.err;
}

TEST(KolorunThreads, TheUsersValueIsLeftAlone) {
  RunResult r = run_kolorun({"--mpi", "-np", "2", "sh", "-c", "echo threads=$OMP_NUM_THREADS"}, 30,
                            {{"OMP_NUM_THREADS", "3"}});
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "threads=3"), 2) << r.out;
  EXPECT_EQ(count(r.err, "OMP_NUM_THREADS"), 0) << r.err;
}

TEST(KolorunThreads, TheUsersValueTravelsWithTheJob) {
  // Other hosts get only exported variables: kolorun passes the user's value as a KOLO_*
  // one, which the dry-run command shows.
  RunResult r = run_kolorun({"--mpi", "--dry-run", "-np", "2", "-H", "a:1,b:1", "true"}, 30,
                            {{"OMP_NUM_THREADS", "3"}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "-x KOLO_OMP_NUM_THREADS "), 1) << r.out;
}

TEST(KolorunThreads, DryRunSaysNothing) {
  RunResult r =
      run_kolorun({"--mpi", "--dry-run", "-np", "2", "true"}, 30, {{"OMP_NUM_THREADS", ""}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.err, "OMP_NUM_THREADS"), 0) << r.err;
}

}  // namespace
}  // namespace kolo::launcher::testing
