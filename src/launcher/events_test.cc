// Tests for the worker exit marker: format, parse, and the message kolorun prints.
#include "launcher/events.h"

#include <gtest/gtest.h>

namespace kolo::launcher {
namespace {

TEST(ExitEvent, RoundTripsExitAndSignal) {
  WorkerExit e{1, "node7", 3, 0};
  EXPECT_EQ(format_exit_event(e, "t1"), "KOLO_LAUNCHER_EVENT token=t1 rank=1 host=node7 exit=3");
  WorkerExit back;
  ASSERT_TRUE(parse_exit_event(format_exit_event(e, "t1"), "t1", &back));
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(back.host, "node7");
  EXPECT_EQ(back.status(), 3);
  EXPECT_TRUE(back.failed());

  WorkerExit k{2, "h", 0, 9};
  EXPECT_EQ(format_exit_event(k, "t1"), "KOLO_LAUNCHER_EVENT token=t1 rank=2 host=h signal=9");
  ASSERT_TRUE(parse_exit_event(format_exit_event(k, "t1"), "t1", &back));
  EXPECT_EQ(back.signal, 9);
  EXPECT_EQ(back.status(), 137);

  ASSERT_TRUE(parse_exit_event("KOLO_LAUNCHER_EVENT token=t1 rank=0 host=h exit=0", "t1", &back));
  EXPECT_FALSE(back.failed());
  EXPECT_EQ(back.stop, Stop::kNone);
  EXPECT_EQ(back.time_us, 0);

  WorkerExit s{3, "h", 0, 15, Stop::kByJob};
  EXPECT_EQ(format_exit_event(s, "t1"),
            "KOLO_LAUNCHER_EVENT token=t1 rank=3 host=h signal=15 stopped=job");
  ASSERT_TRUE(parse_exit_event(format_exit_event(s, "t1"), "t1", &back));
  EXPECT_EQ(back.stop, Stop::kByJob);

  WorkerExit o{4, "h", 0, 15, Stop::kFromOutside, 1700000000123456};
  EXPECT_EQ(format_exit_event(o, "t1"),
            "KOLO_LAUNCHER_EVENT token=t1 rank=4 host=h signal=15 stopped=outside "
            "t=1700000000123456");
  ASSERT_TRUE(parse_exit_event(format_exit_event(o, "t1"), "t1", &back));
  EXPECT_EQ(back.stop, Stop::kFromOutside);
  EXPECT_EQ(back.time_us, 1700000000123456);
}

TEST(ExitEvent, IgnoresOtherLines) {
  WorkerExit e;
  const std::string t = "t1";
  EXPECT_FALSE(parse_exit_event("[1] KOLO_LAUNCHER_EVENT token=t1 rank=1 host=h exit=3", t, &e));
  EXPECT_FALSE(parse_exit_event("KOLO_LAUNCHER_EVENT token=t1 rank=1 host=h", t, &e));
  EXPECT_FALSE(parse_exit_event("KOLO_LAUNCHER_EVENT token=t1 rank=x host=h exit=1", t, &e));
  EXPECT_FALSE(parse_exit_event("KOLO_LAUNCHER_EVENT token=t1 host=h exit=1", t, &e));
  EXPECT_FALSE(parse_exit_event("hello", t, &e));
  // Without the job's token (a program printing the marker) it is not a marker.
  EXPECT_FALSE(parse_exit_event("KOLO_LAUNCHER_EVENT rank=1 host=h exit=3", t, &e));
  EXPECT_FALSE(parse_exit_event("KOLO_LAUNCHER_EVENT token=t2 rank=1 host=h exit=3", t, &e));
  EXPECT_FALSE(parse_exit_event("KOLO_LAUNCHER_EVENT token= rank=1 host=h exit=3", "", &e));
  std::string before;
  EXPECT_FALSE(
      find_exit_event("[0] x KOLO_LAUNCHER_EVENT token=t2 rank=1 host=h exit=3", t, &before, &e));
  // Fields a later shim adds are skipped.
  EXPECT_TRUE(parse_exit_event("KOLO_LAUNCHER_EVENT token=t1 rank=1 host=h exit=1 pid=77", t, &e));
}

// mpirun forwards output in chunks: the marker can follow another worker's unfinished line.
TEST(ExitEvent, IsFoundAfterAnotherWorkersUnfinishedLine) {
  WorkerExit e;
  std::string before;
  ASSERT_TRUE(find_exit_event("[0] zzzzKOLO_LAUNCHER_EVENT token=ab12 rank=1 host=vm exit=3",
                              "ab12", &before, &e));
  EXPECT_EQ(before, "[0] zzzz");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.status(), 3);
  ASSERT_TRUE(find_exit_event(format_exit_event(e, "ab12"), "ab12", &before, &e));
  EXPECT_EQ(before, "");
  const std::string t1 = make_event_token(), t2 = make_event_token();
  EXPECT_EQ(t1.size(), 16u);
  EXPECT_NE(t1, t2);
}

TEST(ExitEvent, DescribesFailures) {
  EXPECT_EQ(describe_exit({1, "node7", 3, 0}), "rank 1 (host node7) exited with status 3");
  EXPECT_EQ(describe_exit({0, "h", 0, 9}), "rank 0 (host h) was killed by signal 9 (Killed)");
  EXPECT_EQ(describe_exit({2, "h", 0, 15, Stop::kFromOutside}),
            "rank 2 (host h) was killed by signal 15 (Terminated) after it was stopped from "
            "outside the job");
  WorkerExit lost{6, "vm", 0, 9};
  lost.shim_lost = true;
  EXPECT_EQ(describe_exit(lost),
            "rank 6 (host vm): its worker shim was killed by signal 9 (Killed) before it reported");
  lost.host = "";
  lost.signal = 0;
  lost.exit_code = 1;
  EXPECT_EQ(describe_exit(lost), "rank 6: its worker shim exited with status 1 before it reported");
}

}  // namespace
}  // namespace kolo::launcher
