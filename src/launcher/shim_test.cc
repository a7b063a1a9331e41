// Tests for the worker shim's pure parts: its arguments and its rank variables, and the
// bound of its poll() (process.h).
#include "launcher/shim.h"

#include <chrono>

#include "launcher/process.h"

#include <gtest/gtest.h>

namespace kolo::launcher {
namespace {

TEST(ShimArgs, ParsesLingerAndProgram) {
  ShimOptions o;
  ASSERT_TRUE(
      parse_shim_args({"--worker-shim", "--linger-seconds=7.5", "--", "prog", "-x", "--"}, &o)
          .ok());
  EXPECT_EQ(o.linger_seconds, 7.5);
  EXPECT_EQ(o.program, (std::vector<std::string>{"prog", "-x", "--"}));
  EXPECT_FALSE(parse_shim_args({"--worker-shim", "--"}, &o).ok());
  EXPECT_FALSE(parse_shim_args({"--worker-shim", "prog"}, &o).ok());
  EXPECT_FALSE(parse_shim_args({"--worker-shim", "--linger-seconds=x", "--", "p"}, &o).ok());
}

TEST(ShimRanks, FromMpirunAndLayout) {
  WorkerRanks r;
  std::string warning;
  ASSERT_TRUE(ranks_from_env({{"OMPI_COMM_WORLD_RANK", "2"},
                              {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                              {"KOLO_HOST_SLOTS", "2,2"}},
                             &r, &warning)
                  .ok());
  EXPECT_EQ(r, (WorkerRanks{2, 4, 0, 2, 1, 2}));
  EXPECT_EQ(warning, "");
  EXPECT_EQ(rank_variables(r).at("KOLO_CROSS_RANK"), "1");
  EXPECT_EQ(rank_variables(r).at("KOLO_LOCAL_SIZE"), "2");
  EXPECT_EQ(rank_variables(r).size(), 6u);
}

TEST(ShimRanks, WithoutLayoutAllOnOneHost) {
  WorkerRanks r;
  std::string warning;
  ASSERT_TRUE(
      ranks_from_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}}, &r, &warning)
          .ok());
  EXPECT_EQ(r, (WorkerRanks{1, 3, 1, 3, 0, 1}));
}

TEST(ShimRanks, WarnsWhenMpirunPlacedRanksDifferently) {
  WorkerRanks r;
  std::string warning;
  ASSERT_TRUE(ranks_from_env({{"OMPI_COMM_WORLD_RANK", "1"},
                              {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                              {"KOLO_HOST_SLOTS", "2,2"}},
                             &r, &warning)
                  .ok());
  EXPECT_NE(warning.find("mpirun placed rank 1 as local rank 0 of 2"), std::string::npos);
  EXPECT_EQ(r.local_rank, 0);
}

TEST(ShimRanks, RejectsMissingOrInconsistentInput) {
  WorkerRanks r;
  std::string warning;
  Status s = ranks_from_env({}, &r, &warning);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("started by mpirun"), std::string::npos);
  s = ranks_from_env(
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"KOLO_HOST_SLOTS", "2,2"}},
      &r, &warning);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("describes 4 workers but mpirun started 3"), std::string::npos)
      << s.message();
}

// Every poll() of the launcher's loops has a bound, even without a deadline: a SIGCHLD
// whose handler runs late (the sanitizers defer signals) must not leave a loop waiting
// for ever (kolorun_tests' ADaemonTheProgramStartsDoesNotOutliveTheJob once timed out so
// under TSan).
TEST(PollTimeout, IsBoundedWithoutADeadlineAndRoundsUpWithOne) {
  EXPECT_EQ(poll_timeout_ms(nullptr), 100);
  const Clock::time_point past = Clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(poll_timeout_ms(&past), 0);
  const Clock::time_point soon = Clock::now() + std::chrono::milliseconds(50);
  const int ms = poll_timeout_ms(&soon);
  EXPECT_GE(ms, 1);
  EXPECT_LE(ms, 51);
}

}  // namespace
}  // namespace kolo::launcher
