// Partitioners against TensorFlow's documented examples, TF's row division, round-robin
// placement.
#include "ps/partition.h"

#include <gtest/gtest.h>

namespace kolo::ps {
namespace {

TEST(PartitionerTest, MinSizeMatchesTensorFlowsExamples) {
  // sharded_variable_test: MinSizePartitioner(min_shard_bytes=4, max_shards=2) on a
  // float32 [6, 1] gives [2, 1]; with max_shards=10, [6, 1].
  EXPECT_EQ(Partitioner::min_size(4, 2).num_shards({6, 1}, 4), 2);
  EXPECT_EQ(Partitioner::min_size(4, 10).num_shards({6, 1}, 4), 6);
  // min_max_variable_partitioner's docstring: float32 [1024, 1024] with 256 KiB slices is
  // 16 partitions when max_partitions >= 16, else max_partitions.
  EXPECT_EQ(Partitioner::min_size(256 << 10, 16).num_shards({1024, 1024}, 4), 16);
  EXPECT_EQ(Partitioner::min_size(256 << 10, 100).num_shards({1024, 1024}, 4), 16);
  EXPECT_EQ(Partitioner::min_size(256 << 10, 5).num_shards({1024, 1024}, 4), 5);
  // The defaults (256 KiB, 1 shard) never split.
  EXPECT_EQ(Partitioner::min_size().num_shards({1 << 20, 64}, 4), 1);
  // ceil: one byte over a shard's minimum makes a second shard.
  EXPECT_EQ(Partitioner::min_size(1024, 8).num_shards({257}, 4), 2);
  EXPECT_EQ(Partitioner::min_size(1024, 8).num_shards({256}, 4), 1);
  // float64 counts 8 bytes an element.
  EXPECT_EQ(Partitioner::min_size(1024, 8).num_shards({256}, 8), 2);
}

TEST(PartitionerTest, FixedShardsIsCappedByRows) {
  EXPECT_EQ(Partitioner::fixed_shards(2).num_shards({10, 1}, 4), 2);
  EXPECT_EQ(Partitioner::fixed_shards(3).num_shards({2, 5}, 4), 2);
  EXPECT_EQ(Partitioner::fixed_shards(3).num_shards({1, 5}, 4), 1);
  EXPECT_EQ(Partitioner::fixed_shards(3).num_shards({}, 4), 1);  // 0-d
  EXPECT_EQ(Partitioner().num_shards({1000, 1000}, 4), 1);
}

TEST(PartitionerTest, MaxSizeFollowsTheAxisSizeFormula) {
  // variable_axis_size_partitioner: rows per shard = max(1, floor(max / row bytes)).
  EXPECT_EQ(Partitioner::max_size(4).num_shards({6, 1}, 4), 6);
  EXPECT_EQ(Partitioner::max_size(4, 2).num_shards({6, 1}, 4), 2);
  EXPECT_EQ(Partitioner::max_size(1024).num_shards({6, 1}, 4), 1);
  EXPECT_EQ(Partitioner::max_size(8).num_shards({5, 1}, 4), 3);  // 2 rows a shard
  EXPECT_EQ(Partitioner::max_size(1).num_shards({3, 4}, 4), 3);  // a row over the limit
}

TEST(PartitionerTest, BadPartitionersAreRefusedByName) {
  Status s = Partitioner::fixed_shards(0).validate();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("FixedShardsPartitioner(num_shards=0)"), std::string::npos);
  EXPECT_FALSE(Partitioner::min_size(0, 2).validate().ok());
  EXPECT_FALSE(Partitioner::min_size(4, 0).validate().ok());
  EXPECT_FALSE(Partitioner::max_size(0).validate().ok());
  EXPECT_TRUE(Partitioner::max_size(4, 0).validate().ok());
  EXPECT_TRUE(Partitioner().validate().ok());
}

TEST(ShardRowsTest, DividesAsTensorFlow) {
  // sharded_variable: 13 rows over 5 shards are [[0,1,2],[3,4,5],[6,7,8],[9,10],[11,12]].
  const auto r = shard_rows(13, 5);
  ASSERT_EQ(r.size(), 5u);
  const std::vector<std::pair<std::int64_t, std::int64_t>> want{
      {0, 3}, {3, 6}, {6, 9}, {9, 11}, {11, 13}};
  EXPECT_EQ(r, want);
  EXPECT_EQ(shard_rows(4, 2), (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 2}, {2, 4}}));
  EXPECT_EQ(shard_rows(1, 1), (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 1}}));
}

TEST(PlaceVariablesTest, RoundRobinOverShardsInCreationOrder) {
  // TensorFlow's example with 3 ps: v0 on ps0, v1 on ps1, v2 on ps2, v3 on ps0.
  std::vector<VariableSpec> v{{"v0", {2}}, {"v1", {2}}, {"v2", {2}}, {"v3", {2}}};
  std::vector<ShardInfo> shards;
  ASSERT_TRUE(place_variables(v, Partitioner(), 3, &shards).ok());
  ASSERT_EQ(shards.size(), 4u);
  EXPECT_EQ(shards[0].ps_task, 0);
  EXPECT_EQ(shards[1].ps_task, 1);
  EXPECT_EQ(shards[2].ps_task, 2);
  EXPECT_EQ(shards[3].ps_task, 0);

  // A sharded variable's shards take the next ps tasks in turn.
  std::vector<VariableSpec> w{{"bias", {3}}, {"emb", {13, 4}}, {"out", {4, 2}}};
  ASSERT_TRUE(place_variables(w, Partitioner::fixed_shards(5), 2, &shards).ok());
  ASSERT_EQ(shards.size(), 3u + 5u + 4u);
  int i = 0;
  for (int s = 0; s < 3; ++s, ++i) EXPECT_EQ(shards[i].variable, "bias");
  const std::int64_t emb_rows[] = {3, 3, 3, 2, 2}, emb_begin[] = {0, 3, 6, 9, 11};
  for (int s = 0; s < 5; ++s, ++i) {
    EXPECT_EQ(shards[i].variable, "emb");
    EXPECT_EQ(shards[i].shard, s);
    EXPECT_EQ(shards[i].shape, (std::vector<std::int64_t>{emb_rows[s], 4}));
    EXPECT_EQ(shards[i].row_begin, emb_begin[s]);
  }
  for (std::size_t k = 0; k < shards.size(); ++k) EXPECT_EQ(shards[k].ps_task, int(k % 2)) << k;
}

TEST(PlaceVariablesTest, ScalarsAndErrors) {
  std::vector<ShardInfo> shards;
  ASSERT_TRUE(place_variables({{"step", {}}}, Partitioner::fixed_shards(4), 2, &shards).ok());
  ASSERT_EQ(shards.size(), 1u);
  EXPECT_TRUE(shards[0].shape.empty());

  Status s = place_variables({{"a", {2}}, {"a", {3}}}, Partitioner(), 1, &shards);
  EXPECT_NE(s.message().find("'a' is created twice"), std::string::npos) << s.message();
  s = place_variables({{"ids", {2}, DataType::kInt64}}, Partitioner(), 1, &shards);
  EXPECT_NE(s.message().find("'ids' is int64"), std::string::npos) << s.message();
  s = place_variables({{"a", {2}}}, Partitioner(), 0, &shards);
  EXPECT_NE(s.message().find("at least one ps task"), std::string::npos) << s.message();
  s = place_variables({{"a", {2}}}, Partitioner::fixed_shards(0), 1, &shards);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace kolo::ps
