// Tests for choosing the worker that ended the job, and for reading mpirun's messages.
#include "launcher/cause.h"

#include <gtest/gtest.h>

namespace kolo::launcher {
namespace {

WorkerExit exited(int rank, int code, long long t = 0) {
  WorkerExit e{rank, "h", code, 0};
  e.time_us = t;
  return e;
}

WorkerExit killed(int rank, int sig, long long t = 0) {
  WorkerExit e{rank, "h", 0, sig};
  e.time_us = t;
  return e;
}

TEST(Cause, WeighsWhatEachReportSays) {
  EXPECT_EQ(cause_weight(exited(0, 0)), 0);
  EXPECT_EQ(cause_weight(exited(0, 1)), 1);
  EXPECT_EQ(cause_weight(killed(0, 9)), 2);
  WorkerExit stopped = killed(0, 15);
  stopped.stop = Stop::kByJob;
  EXPECT_EQ(cause_weight(stopped), 0);
  stopped.stop = Stop::kFromOutside;
  EXPECT_EQ(cause_weight(stopped), 2);
  WorkerExit lost = exited(3, 1);
  lost.shim_lost = true;
  EXPECT_EQ(cause_weight(lost), 2);
}

// The defect of issue 11: a survivor that noticed the dead rank reported first.
TEST(Cause, ARankKilledBySignalBeatsSurvivorsThatReportedFirst) {
  auto c = choose_cause({exited(15, 1, 200), exited(3, 1, 150), killed(6, 9, 100)});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->rank, 6);
  EXPECT_EQ(c->status(), 137);
}

TEST(Cause, AmongEqualsTheEarliestByTimeThenByArrival) {
  EXPECT_EQ(choose_cause({exited(2, 1, 300), exited(1, 3, 100), exited(0, 1, 200)})->rank, 1);
  EXPECT_EQ(choose_cause({exited(2, 1), exited(1, 3, 100)})->rank, 2);  // a time is missing
  EXPECT_EQ(choose_cause({killed(4, 9, 50), killed(5, 6, 60)})->rank, 4);
}

// Issue 36: rank 2's program failed by itself (exit 1) and the ranks waiting for it in a
// collective failed at once, exiting before it: their kolo said they ended because rank 2
// left, so rank 2 is the cause although its exit came last.
TEST(Cause, RanksThatEndedBecauseAFailedRankLeftAreNotItsCause) {
  const std::vector<WorkerExit> exits = {exited(0, 1, 100), exited(1, 1, 110), exited(2, 1, 300)};
  EXPECT_EQ(choose_cause(exits)->rank, 0);  // by time alone
  const std::map<int, std::vector<int>> after = {{0, {2}}, {1, {2}}};
  EXPECT_EQ(choose_cause(without_consequences(exits, after))->rank, 2);
  // A rank named that did not fail (it ended cleanly, so it is no candidate) changes
  // nothing, and neither does naming oneself.
  EXPECT_EQ(without_consequences({exited(0, 1, 100)}, {{0, {1}}}).size(), 1u);
  EXPECT_EQ(without_consequences({exited(0, 1, 100), exited(1, 1, 50)}, {{1, {1}}}).size(), 2u);
  // Each naming the other: nothing better is known, all stay.
  EXPECT_EQ(
      without_consequences({exited(0, 1, 100), exited(1, 1, 50)}, {{0, {1}}, {1, {0}}}).size(), 2u);
  // A signal still outweighs: the killed rank stays the cause.
  EXPECT_EQ(
      choose_cause(without_consequences({exited(0, 1, 100), killed(1, 9, 200)}, {{0, {2}}}))->rank,
      1);
}

TEST(Cause, WorkersStoppedByTheJobAreNoCause) {
  WorkerExit stopped = killed(0, 15, 10);
  stopped.stop = Stop::kByJob;
  EXPECT_FALSE(choose_cause({stopped, exited(1, 0)}));
  EXPECT_FALSE(choose_cause({}));
  EXPECT_EQ(choose_cause({stopped, exited(1, 2, 20)})->rank, 1);
}

TEST(MpirunMessages, NamesAProcessKilledBySignal) {
  MpirunMessages m;
  m.feed("--------------------------------------------------------------------------");
  m.feed("Primary job  terminated normally, but 1 process returned");
  EXPECT_FALSE(m.aborting());
  m.feed("a non-zero exit code. Per user-direction, the job has been aborted.");
  EXPECT_TRUE(m.aborting());
  EXPECT_TRUE(m.take_named().empty());
  m.feed(
      "mpirun noticed that process rank 6 with PID 0 on node vm.example exited on signal 9 "
      "(Killed).");
  auto named = m.take_named();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 6);
  EXPECT_EQ(named[0].host, "vm.example");
  EXPECT_EQ(named[0].signal, 9);
  EXPECT_TRUE(named[0].shim_lost);
  EXPECT_TRUE(m.take_named().empty());
}

TEST(MpirunMessages, NamesAProcessThatExitedNonZero) {
  MpirunMessages m;
  m.feed("mpirun detected that one or more processes exited with non-zero status, thus causing");
  EXPECT_TRUE(m.aborting());
  m.feed("the job to be terminated. The first process to do so was:");
  m.feed("");
  m.feed("  Process name: [[24311,1],1]");
  m.feed("  Exit code:    143");
  auto named = m.take_named();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 1);
  EXPECT_EQ(named[0].exit_code, 143);
  EXPECT_TRUE(named[0].shim_lost);
}

TEST(MpirunMessages, IgnoresOtherLines) {
  MpirunMessages m;
  m.feed("[vm:1234] [[1,0],0] ORTE_ERROR_LOG: something");
  m.feed("  Exit code:    1");  // without a process name before it
  EXPECT_FALSE(m.aborting());
  EXPECT_TRUE(m.take_named().empty());
}

}  // namespace
}  // namespace kolo::launcher
