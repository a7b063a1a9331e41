// Tests for the worker exit marker: format, parse, and the message kolorun prints.
#include "launcher/events.h"

#include <gtest/gtest.h>

namespace kolo::launcher {
namespace {

TEST(ExitEvent, RoundTripsExitAndSignal) {
  WorkerExit e{1, "node7", 3, 0};
  EXPECT_EQ(format_exit_event(e), "KOLO_LAUNCHER_EVENT rank=1 host=node7 exit=3");
  WorkerExit back;
  ASSERT_TRUE(parse_exit_event(format_exit_event(e), &back));
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(back.host, "node7");
  EXPECT_EQ(back.status(), 3);
  EXPECT_TRUE(back.failed());

  WorkerExit k{2, "h", 0, 9};
  EXPECT_EQ(format_exit_event(k), "KOLO_LAUNCHER_EVENT rank=2 host=h signal=9");
  ASSERT_TRUE(parse_exit_event(format_exit_event(k), &back));
  EXPECT_EQ(back.signal, 9);
  EXPECT_EQ(back.status(), 137);

  ASSERT_TRUE(parse_exit_event("KOLO_LAUNCHER_EVENT rank=0 host=h exit=0", &back));
  EXPECT_FALSE(back.failed());
  EXPECT_FALSE(back.stopped);

  WorkerExit s{3, "h", 0, 15, true};
  EXPECT_EQ(format_exit_event(s), "KOLO_LAUNCHER_EVENT rank=3 host=h signal=15 stopped=1");
  ASSERT_TRUE(parse_exit_event(format_exit_event(s), &back));
  EXPECT_TRUE(back.stopped);
}

TEST(ExitEvent, IgnoresOtherLines) {
  WorkerExit e;
  EXPECT_FALSE(parse_exit_event("[1] KOLO_LAUNCHER_EVENT rank=1 host=h exit=3", &e));
  EXPECT_FALSE(parse_exit_event("KOLO_LAUNCHER_EVENT rank=1 host=h", &e));
  EXPECT_FALSE(parse_exit_event("KOLO_LAUNCHER_EVENT rank=x host=h exit=1", &e));
  EXPECT_FALSE(parse_exit_event("KOLO_LAUNCHER_EVENT host=h exit=1", &e));
  EXPECT_FALSE(parse_exit_event("hello", &e));
  // Fields a later shim adds are skipped.
  EXPECT_TRUE(parse_exit_event("KOLO_LAUNCHER_EVENT rank=1 host=h exit=1 pid=77", &e));
}

TEST(ExitEvent, DescribesFailures) {
  EXPECT_EQ(describe_exit({1, "node7", 3, 0}), "rank 1 (host node7) exited with status 3");
  EXPECT_EQ(describe_exit({0, "h", 0, 9}), "rank 0 (host h) was killed by signal 9 (Killed)");
}

}  // namespace
}  // namespace kolo::launcher
