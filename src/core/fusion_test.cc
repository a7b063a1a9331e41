// plan_fusion(): which responses of a cycle are packed together (pure, no transport).
#include "core/fusion.h"

#include "core/entry.h"
#include "core/executor.h"

#include <gtest/gtest.h>

namespace kolo::core {
namespace {

Response allreduce(const std::string& name, std::int64_t elements,
                   DataType dtype = DataType::kFloat32, ReduceOp op = ReduceOp::kSum) {
  Response r;
  r.name = name;
  r.op = OpType::kAllreduce;
  r.dtype = dtype;
  r.wire_dtype = dtype;
  r.reduce_op = op;
  r.shapes = {{elements}};
  return r;
}

Response other(const std::string& name, OpType op) {
  Response r;
  r.name = name;
  r.op = op;
  r.shapes = {{4}};
  return r;
}

using Groups = std::vector<FusionGroup>;

TEST(FusionTest, CompatibleAllreducesFuseUpToTheThreshold) {
  // 4-byte floats: 10 elements = 40 bytes.
  const std::vector<Response> rs = {allreduce("a", 10), allreduce("b", 10), allreduce("c", 10)};
  EXPECT_EQ(plan_fusion(rs, 120), (Groups{{0, 1, 2}}));
  EXPECT_EQ(plan_fusion(rs, 80), (Groups{{0, 1}, {2}}));
  EXPECT_EQ(plan_fusion(rs, 79), (Groups{{0}, {1}, {2}}));
  EXPECT_EQ(plan_fusion(rs, 0), (Groups{{0}, {1}, {2}})) << "0 disables fusion";
}

TEST(FusionTest, AverageAndSumShareTheWireButMinDoesNot) {
  const std::vector<Response> rs = {allreduce("a", 1, DataType::kFloat32, ReduceOp::kAverage),
                                    allreduce("b", 1, DataType::kFloat32, ReduceOp::kSum),
                                    allreduce("c", 1, DataType::kFloat32, ReduceOp::kMin),
                                    allreduce("d", 1, DataType::kFloat32, ReduceOp::kMin)};
  EXPECT_EQ(plan_fusion(rs, 1 << 20), (Groups{{0, 1}, {2, 3}}));
}

TEST(FusionTest, LooksPastOtherDtypesButNotPastOtherOps) {
  const std::vector<Response> rs = {allreduce("f32a", 4),
                                    allreduce("f16a", 4, DataType::kFloat16),
                                    allreduce("f32b", 4),
                                    allreduce("f16b", 4, DataType::kFloat16),
                                    other("bar", OpType::kBarrier),
                                    allreduce("f32c", 4),
                                    allreduce("f32d", 4)};
  EXPECT_EQ(plan_fusion(rs, 1 << 20), (Groups{{0, 2}, {1, 3}, {4}, {5, 6}}));
}

TEST(FusionTest, CompressedTensorsFuseByWireDtypeAndCountWireBytes) {
  Response compressed = allreduce("f32-as-f16", 10);
  compressed.wire_dtype = DataType::kFloat16;
  EXPECT_EQ(wire_bytes(compressed), 20);
  EXPECT_EQ(allreduce_bytes(compressed), 40);
  const std::vector<Response> rs = {compressed, allreduce("f32", 10),
                                    allreduce("f16", 10, DataType::kFloat16)};
  EXPECT_EQ(plan_fusion(rs, 40), (Groups{{0, 2}, {1}}));
}

TEST(FusionTest, OversizedErrorAndNonAllreduceResponsesStayAlone) {
  Response failed = allreduce("bad", 4);
  failed.error_code = ErrorCode::kMismatch;
  failed.error = "shape mismatch";
  const std::vector<Response> rs = {allreduce("big", 1000),
                                    allreduce("a", 4),
                                    failed,
                                    allreduce("b", 4),
                                    other("bc", OpType::kBroadcast),
                                    other("ag", OpType::kAllgather)};
  // "big" is 4000 bytes > 100: alone. The error response runs nothing: a and b fuse past it.
  EXPECT_EQ(plan_fusion(rs, 100), (Groups{{0}, {1, 3}, {2}, {4}, {5}}));
}

TEST(FusionTest, GroupedAllreduceCountsAllItsTensors) {
  Response grouped = allreduce("g", 10);
  grouped.shapes = {{10}, {5, 2}};  // 20 floats = 80 bytes
  EXPECT_EQ(allreduce_bytes(grouped), 80);
  const std::vector<Response> rs = {grouped, allreduce("a", 5)};
  EXPECT_EQ(plan_fusion(rs, 100), (Groups{{0, 1}}));
  EXPECT_EQ(plan_fusion(rs, 99), (Groups{{0}, {1}}));
}

TEST(FusionTest, EveryResponseIsPlacedExactlyOnce) {
  std::vector<Response> rs;
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt64};
  for (int i = 0; i < 200; ++i) {
    rs.push_back(i % 17 == 0 ? other("b" + std::to_string(i), OpType::kBroadcast)
                             : allreduce("t" + std::to_string(i), 1 + i % 13, dtypes[i % 3]));
  }
  std::vector<int> seen(rs.size(), 0);
  for (const auto& g : plan_fusion(rs, 256)) {
    std::int64_t bytes = 0;
    for (std::size_t i : g) {
      ++seen[i];
      bytes += allreduce_bytes(rs[i]);
      EXPECT_EQ(rs[i].dtype, rs[g[0]].dtype);
    }
    if (g.size() > 1) {
      EXPECT_LE(bytes, 256);
    }
  }
  for (std::size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(seen[i], 1) << i;
}

// allreduce_pieces_of(): a fused group goes to the transport as the tensors themselves
// unless some tensor's memory overlaps another's (each would see the others' results), a
// rank joined, or the wire dtype is compressed; a lone tensor in place always can.
TEST(FusionPiecesTest, TensorsThatShareMemoryArePacked) {
  std::vector<float> memory(64);
  auto view = [&](std::size_t at, std::int64_t n) {
    TensorView v;
    v.data = memory.data() + at;
    v.dtype = DataType::kFloat32;
    v.shape = {n};
    return v;
  };
  auto entry = [&](TensorView in, TensorView out) {
    Entry e;
    e.inputs = {in};
    e.outputs = {out};
    return e;
  };
  const Response a = allreduce("a", 8), b = allreduce("b", 8);
  std::vector<transport::AllreducePiece> pieces;

  Entry alone = entry(view(0, 8), view(0, 8));
  ASSERT_TRUE(allreduce_pieces_of({{&a, &alone}}, 2, &pieces));
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].in, memory.data());
  EXPECT_EQ(pieces[0].count, 8u);

  Entry apart = entry(view(8, 8), view(16, 8));  // b: its own input and output
  EXPECT_TRUE(allreduce_pieces_of({{&a, &alone}, {&b, &apart}}, 2, &pieces));
  EXPECT_EQ(pieces.size(), 2u);

  Entry overlapping = entry(view(4, 8), view(4, 8));  // b starts inside a
  EXPECT_FALSE(allreduce_pieces_of({{&a, &alone}, {&b, &overlapping}}, 2, &pieces));
  Entry shifted = entry(view(0, 8), view(2, 8));  // a tensor's own input and output overlap
  EXPECT_FALSE(allreduce_pieces_of({{&a, &shifted}}, 2, &pieces));
  Entry own_copy = entry(view(0, 8), view(8, 8));  // apart: fine
  EXPECT_TRUE(allreduce_pieces_of({{&a, &own_copy}}, 2, &pieces));

  EXPECT_FALSE(allreduce_pieces_of({{&a, nullptr}}, 2, &pieces));  // joined: the identity
  Response compressed = allreduce("c", 8);
  compressed.wire_dtype = DataType::kFloat16;
  EXPECT_FALSE(allreduce_pieces_of({{&compressed, &alone}}, 2, &pieces));
}

}  // namespace
}  // namespace kolo::core
