// Message text helpers (common/format.h).
#include "common/format.h"

#include <gtest/gtest.h>

namespace kolo {
namespace {

TEST(FormatTest, RanksStringNamesOneOrManyAndCutsLongLists) {
  EXPECT_EQ(ranks_string({3}), "rank 3");
  EXPECT_EQ(ranks_string({1, 3, 5}), "ranks 1, 3, 5");
  std::vector<int> many(20);
  for (int i = 0; i < 20; ++i) many[i] = i;
  EXPECT_EQ(ranks_string(many),
            "ranks 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ... (20 ranks)");
}

TEST(FormatTest, NumberStringIsShortest) {
  EXPECT_EQ(number_string(600), "600");
  EXPECT_EQ(number_string(0.5), "0.5");
  EXPECT_EQ(number_string(1e10), "1e+10");
}

}  // namespace
}  // namespace kolo
