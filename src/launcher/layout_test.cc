// Tests for rank layout arithmetic: (workers per host, rank) -> local and cross ranks.
#include "launcher/layout.h"

#include <gtest/gtest.h>

namespace kolo::launcher {
namespace {

std::vector<WorkerRanks> all_ranks(const std::vector<int>& layout) {
  std::vector<WorkerRanks> out;
  int size = 0;
  for (int c : layout) size += c;
  for (int r = 0; r < size; ++r) {
    WorkerRanks w;
    EXPECT_TRUE(compute_ranks(layout, r, &w).ok()) << r;
    out.push_back(w);
  }
  return out;
}

// {rank, size, local_rank, local_size, cross_rank, cross_size}
TEST(Layout, TwoHostsOfTwo) {
  EXPECT_EQ(all_ranks({2, 2}), (std::vector<WorkerRanks>{
                                   {0, 4, 0, 2, 0, 2},
                                   {1, 4, 1, 2, 0, 2},
                                   {2, 4, 0, 2, 1, 2},
                                   {3, 4, 1, 2, 1, 2},
                               }));
}

TEST(Layout, UnevenHostsThreeAndOne) {
  // Local rank 0 exists on both hosts; local ranks 1 and 2 only on the first.
  EXPECT_EQ(all_ranks({3, 1}), (std::vector<WorkerRanks>{
                                   {0, 4, 0, 3, 0, 2},
                                   {1, 4, 1, 3, 0, 1},
                                   {2, 4, 2, 3, 0, 1},
                                   {3, 4, 0, 1, 1, 2},
                               }));
}

TEST(Layout, SmallerHostFirst) {
  EXPECT_EQ(all_ranks({1, 2}), (std::vector<WorkerRanks>{
                                   {0, 3, 0, 1, 0, 2},
                                   {1, 3, 0, 2, 1, 2},
                                   {2, 3, 1, 2, 0, 1},
                               }));
}

TEST(Layout, SingleHost) {
  EXPECT_EQ(all_ranks({3}), (std::vector<WorkerRanks>{
                                {0, 3, 0, 3, 0, 1},
                                {1, 3, 1, 3, 0, 1},
                                {2, 3, 2, 3, 0, 1},
                            }));
}

TEST(Layout, RejectsRanksOutsideAndEmptyHosts) {
  WorkerRanks w;
  EXPECT_FALSE(compute_ranks({2, 2}, 4, &w).ok());
  EXPECT_FALSE(compute_ranks({2, 2}, -1, &w).ok());
  EXPECT_FALSE(compute_ranks({2, 0}, 0, &w).ok());
  EXPECT_FALSE(compute_ranks({}, 0, &w).ok());
}

TEST(Layout, FillHostsInOrder) {
  const std::vector<HostSlots> hosts = {{"a", 2}, {"b", 2}, {"c", 4}};
  EXPECT_EQ(fill_hosts(hosts, 8), (std::vector<int>{2, 2, 4}));
  EXPECT_EQ(fill_hosts(hosts, 3), (std::vector<int>{2, 1}));
  EXPECT_EQ(fill_hosts(hosts, 1), (std::vector<int>{1}));
  EXPECT_EQ(fill_hosts({}, 5), (std::vector<int>{5}));
}

TEST(Layout, FormatsAndParses) {
  std::vector<int> layout;
  ASSERT_TRUE(parse_layout("2,2,1", &layout).ok());
  EXPECT_EQ(layout, (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(format_layout(layout), "2,2,1");
  for (const char* bad : {"", "2,,2", "2,", "0", "a", "-1", "2;2"}) {
    Status s = parse_layout(bad, &layout);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("KOLO_HOST_SLOTS"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace kolo::launcher
