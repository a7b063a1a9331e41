// DistributedSampler: shards partition the dataset, equal sizes with drop_last, the same
// permutation on every rank, a new one each epoch, deterministic per seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kolo/torch.h"

namespace kolo {
namespace {

// DistributedSampler(10, 1, 0, shuffle, seed 0).indices() at epoch 0.
const std::vector<std::int64_t> kPinned = {7, 2, 0, 8, 3, 9, 6, 1, 5, 4};

std::vector<std::vector<std::int64_t>> all_shards(std::int64_t size, int replicas, bool shuffle,
                                                  bool drop_last, std::uint64_t seed = 7,
                                                  std::int64_t epoch = 0) {
  std::vector<std::vector<std::int64_t>> shards;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s(size, replicas, r, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    shards.push_back(s.indices());
    EXPECT_EQ(static_cast<std::int64_t>(shards.back().size()), s.shard_size());
  }
  return shards;
}

// Rebuilds the global order from the round-robin shards: perm[rank + k * replicas].
std::vector<std::int64_t> interleave(const std::vector<std::vector<std::int64_t>>& shards) {
  std::vector<std::int64_t> perm;
  for (std::size_t k = 0;; ++k) {
    bool any = false;
    for (const auto& s : shards) {
      if (k < s.size()) {
        perm.push_back(s[k]);
        any = true;
      }
    }
    if (!any) return perm;
  }
}

// Every combination of replicas 1..5, several sizes (empty, smaller than the replica
// count, divisible or not) and shuffle on/off. Loops, not TEST_P: each gtest case is a
// process under ctest, and loading libtorch costs most of a second.
template <typename Check>
void for_each_setup(Check check) {
  for (int replicas = 1; replicas <= 5; ++replicas) {
    for (std::int64_t size : {0, 1, 4, 7, 10, 101, 1000}) {
      for (bool shuffle : {false, true}) {
        SCOPED_TRACE(::testing::Message() << replicas << " replicas, size " << size
                                          << (shuffle ? ", shuffled" : ", in order"));
        check(replicas, size, shuffle);
      }
    }
  }
}

TEST(SamplerTest, ShardsAreDisjointAndCoverTheDataset) {
  for_each_setup([](int replicas, std::int64_t size, bool shuffle) {
    const auto shards = all_shards(size, replicas, shuffle, /*drop_last=*/false);
    std::set<std::int64_t> seen;
    for (int r = 0; r < replicas; ++r) {
      const std::int64_t want = size / replicas + (r < size % replicas ? 1 : 0);
      EXPECT_EQ(static_cast<std::int64_t>(shards[r].size()), want) << "rank " << r;
      for (std::int64_t i : shards[r]) {
        EXPECT_GE(i, 0);
        EXPECT_LT(i, size);
        EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice (rank " << r << ")";
      }
    }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), size);
  });
}

TEST(SamplerTest, DropLastGivesEqualDisjointShards) {
  for_each_setup([](int replicas, std::int64_t size, bool shuffle) {
    const auto shards = all_shards(size, replicas, shuffle, /*drop_last=*/true);
    std::set<std::int64_t> seen;
    for (int r = 0; r < replicas; ++r) {
      EXPECT_EQ(static_cast<std::int64_t>(shards[r].size()), size / replicas) << "rank " << r;
      for (std::int64_t i : shards[r]) EXPECT_TRUE(seen.insert(i).second) << i;
    }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), size / replicas * replicas);
  });
}

TEST(SamplerTest, WithoutShuffleIsIdentityOrderRoundRobin) {
  const auto shards = all_shards(10, 3, /*shuffle=*/false, /*drop_last=*/false);
  EXPECT_EQ(shards[0], (std::vector<std::int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(shards[1], (std::vector<std::int64_t>{1, 4, 7}));
  EXPECT_EQ(shards[2], (std::vector<std::int64_t>{2, 5, 8}));
  const auto dropped = all_shards(10, 3, /*shuffle=*/false, /*drop_last=*/true);
  EXPECT_EQ(dropped[0], (std::vector<std::int64_t>{0, 3, 6}));
}

TEST(SamplerTest, SamePermutationOnEveryRankForAnEpoch) {
  // Every replica count cuts the same global permutation into shards.
  const std::vector<std::int64_t> reference = interleave(all_shards(1000, 1, true, false, 7, 3));
  for (int replicas = 2; replicas <= 5; ++replicas) {
    EXPECT_EQ(interleave(all_shards(1000, replicas, true, false, 7, 3)), reference)
        << replicas << " replicas";
  }
  std::vector<std::int64_t> sorted = reference;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_FALSE(std::is_sorted(reference.begin(), reference.end()));
}

TEST(SamplerTest, OtherEpochGivesOtherPermutation) {
  DistributedSampler s(1000, 2, 1, true, 42);
  s.set_epoch(0);
  const auto e0 = s.indices();
  s.set_epoch(1);
  const auto e1 = s.indices();
  EXPECT_NE(e0, e1);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), e0);
}

TEST(SamplerTest, DeterministicForASeed) {
  const auto a = DistributedSampler(1000, 3, 2, true, 123).indices();
  const auto b = DistributedSampler(1000, 3, 2, true, 123).indices();
  const auto c = DistributedSampler(1000, 3, 2, true, 124).indices();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Pinned values: the shuffle is our own Fisher-Yates over mt19937_64, so a change of
  // standard library must not change which samples a rank reads.
  const auto pinned = DistributedSampler(10, 1, 0, true, 0).indices();
  EXPECT_EQ(pinned, kPinned) << "shuffle algorithm changed";
}

TEST(SamplerTest, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 0, 0), Error);
  EXPECT_THROW(DistributedSampler(10, 2, 2), Error);
  EXPECT_THROW(DistributedSampler(10, 2, -1), Error);
  EXPECT_THROW(DistributedSampler(-1, 2, 0), Error);
  try {
    DistributedSampler(10, 3, 5);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rank must be in [0, 3), got 5"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kolo
