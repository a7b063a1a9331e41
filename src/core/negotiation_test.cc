// Negotiation's pure logic (core/negotiation.h): validation and responses of
// make_response, readiness/join/stall bookkeeping of MessageTable, reducescatter_rows.
#include "core/negotiation.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

namespace kolo::core {
namespace {

Request req(int rank, OpType op = OpType::kAllreduce, Shape shape = {2, 3},
            const std::string& name = "x") {
  Request r;
  r.rank = rank;
  r.name = name;
  r.op = op;
  r.shapes = {std::move(shape)};
  return r;
}

// Requests of ranks 0..n-1, identical but for the rank.
std::vector<Request> same(int n, OpType op = OpType::kAllreduce, Shape shape = {2, 3}) {
  std::vector<Request> v;
  for (int r = 0; r < n; ++r) v.push_back(req(r, op, shape));
  return v;
}

// An error response with `code` whose message contains every one of `parts`.
::testing::AssertionResult is_error(const Response& resp, ErrorCode code,
                                    std::initializer_list<std::string> parts) {
  if (!resp.is_error()) return ::testing::AssertionFailure() << "not an error response";
  if (resp.error_code != code) {
    return ::testing::AssertionFailure()
           << "code " << error_code_name(resp.error_code) << ", message: " << resp.error;
  }
  for (const auto& p : parts) {
    if (resp.error.find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << p << "' missing from: " << resp.error;
    }
  }
  return ::testing::AssertionSuccess();
}

// Process-set registration: the coordinator checks the ranks every rank sent.
TEST(MakeResponseTest, ProcessSetChanges) {
  auto add = [](std::vector<std::vector<std::int64_t>> lists) {
    std::vector<Request> reqs;
    for (std::size_t r = 0; r < lists.size(); ++r) {
      Request q = req(static_cast<int>(r), OpType::kAddProcessSet, {}, "kolo.process_set.0");
      q.shapes.clear();
      q.splits = lists[r];
      reqs.push_back(q);
    }
    return reqs;
  };
  Response ok = make_response(add({{0, 2}, {0, 2}, {0, 2}}), {}, 3);
  ASSERT_FALSE(ok.is_error()) << ok.error;
  EXPECT_EQ(ok.op, OpType::kAddProcessSet);
  EXPECT_EQ(ok.splits, (std::vector<std::int64_t>{0, 2}));
  EXPECT_TRUE(is_error(make_response(add({{0, 1}, {0, 2}, {0, 2}}), {}, 3), ErrorCode::kMismatch,
                       {"Mismatched ranks for add_process_set 'kolo.process_set.0': [0, 1] on "
                        "rank 0; [0, 2] on ranks 1, 2.",
                        "in the same order"}));
  EXPECT_TRUE(is_error(make_response(add({{}, {}}), {}, 2), ErrorCode::kInvalidArgument,
                       {"needs at least one rank"}));
  EXPECT_TRUE(is_error(make_response(add({{1, 2}, {1, 2}}), {}, 2), ErrorCode::kInvalidArgument,
                       {"process set [1, 2] names rank 2, but the job has 2 ranks (0 to 1)."}));
  EXPECT_TRUE(is_error(make_response(add({{1, 1}, {1, 1}}), {}, 2), ErrorCode::kInvalidArgument,
                       {"names rank 1 twice"}));
  EXPECT_TRUE(is_error(make_response(add({{1, 0}, {1, 0}}), {}, 2), ErrorCode::kInvalidArgument,
                       {"not in ascending order"}));
  // A joined rank would not take part: refused like the other ops that need every rank.
  EXPECT_TRUE(is_error(make_response(add({{0, 1}}), {1}, 2), ErrorCode::kInvalidArgument,
                       {"cannot run while rank 1 has joined"}));
  auto remove = [](std::vector<int> ids) {
    std::vector<Request> reqs;
    for (std::size_t r = 0; r < ids.size(); ++r) {
      Request q = req(static_cast<int>(r), OpType::kRemoveProcessSet, {}, "kolo.process_set.1");
      q.shapes.clear();
      q.root = ids[r];
      reqs.push_back(q);
    }
    return reqs;
  };
  Response removed = make_response(remove({3, 3}), {}, 2);
  ASSERT_FALSE(removed.is_error()) << removed.error;
  EXPECT_EQ(removed.root, 3);
  EXPECT_TRUE(is_error(make_response(remove({3, 4}), {}, 2), ErrorCode::kMismatch,
                       {"Mismatched process sets for remove_process_set",
                        "set 3 on rank 0; set 4 "
                        "on rank 1"}));
  EXPECT_TRUE(is_error(make_response(remove({0, 0}), {}, 2), ErrorCode::kInvalidArgument,
                       {"the global process set (id 0) cannot be removed"}));
  // An add on one rank and a remove on another under the same name.
  std::vector<Request> mixed = {add({{0}})[0], remove({0, 1})[1]};
  mixed[0].name = mixed[1].name;
  EXPECT_TRUE(is_error(make_response(mixed, {}, 2), ErrorCode::kMismatch,
                       {"add_process_set on rank 0; remove_process_set on rank 1"}));
}

TEST(MakeResponseTest, MatchingAllreduceCarriesEverything) {
  auto reqs = same(3);
  for (auto& r : reqs) {
    r.dtype = DataType::kFloat16;
    r.reduce_op = ReduceOp::kAverage;
    r.prescale = 0.5;
    r.postscale = 4;
    r.shapes = {{2, 3}, {7}};  // grouped
  }
  const Response resp = make_response(reqs, {}, 3);
  ASSERT_FALSE(resp.is_error()) << resp.error;
  EXPECT_EQ(resp.op, OpType::kAllreduce);
  EXPECT_EQ(resp.name, "x");
  EXPECT_EQ(resp.dtype, DataType::kFloat16);
  EXPECT_EQ(resp.reduce_op, ReduceOp::kAverage);
  EXPECT_EQ(resp.prescale, 0.5);
  EXPECT_EQ(resp.postscale, 4);
  EXPECT_EQ(resp.shapes, (std::vector<Shape>{{2, 3}, {7}}));
  EXPECT_TRUE(resp.joined_ranks.empty());
}

TEST(MakeResponseTest, OpDtypeAndDeviceMismatches) {
  auto reqs = same(2);
  reqs[1].op = OpType::kAllgather;
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kMismatch,
                       {"'x'", "allreduce on rank 0", "allgather on rank 1"}));

  reqs = same(3);
  reqs[1].dtype = DataType::kFloat64;
  const Response dt = make_response(reqs, {}, 3);
  EXPECT_TRUE(is_error(dt, ErrorCode::kMismatch,
                       {"data types", "'x'", "float32 on ranks 0, 2", "float64 on rank 1"}));
  EXPECT_EQ(dt.name, "x");
  EXPECT_EQ(dt.op, OpType::kAllreduce);

  reqs = same(2);
  reqs[0].device = DeviceKind::kCUDA;
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kMismatch,
                       {"devices", "'x'", "cuda on rank 0", "cpu on rank 1"}));
}

TEST(MakeResponseTest, ShapeMismatch) {
  auto reqs = same(2);
  reqs[1].shapes = {{4}};
  Response resp = make_response(reqs, {}, 2);
  EXPECT_TRUE(is_error(resp, ErrorCode::kMismatch, {"'x'", "[2, 3] on rank 0", "[4] on rank 1"}));
  EXPECT_EQ(resp.error.find("same number of elements"), std::string::npos) << resp.error;

  reqs[1].shapes = {{3, 2}};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kMismatch,
                       {"[2, 3] on rank 0", "[3, 2] on rank 1",
                        "the same number of elements but different dimensions"}));

  // Broadcast checks shapes too.
  reqs = same(2, OpType::kBroadcast);
  reqs[0].shapes = {{5}};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kMismatch,
                       {"broadcast 'x'", "[5] on rank 0", "[2, 3] on rank 1"}));
}

TEST(MakeResponseTest, ReduceOpAndScaleMismatches) {
  auto reqs = same(2);
  reqs[1].reduce_op = ReduceOp::kMax;
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kMismatch,
                       {"reduce ops", "'x'", "sum on rank 0", "max on rank 1"}));

  reqs = same(2);
  reqs[0].prescale = 0.5;
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kMismatch,
                       {"prescale", "'x'", "0.5 on rank 0", "1 on rank 1"}));

  reqs = same(3, OpType::kReducescatter);
  reqs[2].postscale = 2;
  EXPECT_TRUE(is_error(make_response(reqs, {}, 3), ErrorCode::kMismatch,
                       {"postscale", "reducescatter 'x'", "1 on ranks 0, 1", "2 on rank 2"}));
}

TEST(MakeResponseTest, BroadcastRoot) {
  auto reqs = same(2, OpType::kBroadcast);
  for (auto& r : reqs) r.root = 1;
  Response ok = make_response(reqs, {}, 2);
  ASSERT_FALSE(ok.is_error()) << ok.error;
  EXPECT_EQ(ok.root, 1);
  EXPECT_EQ(ok.shapes, (std::vector<Shape>{{2, 3}}));

  reqs[0].root = 0;
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kMismatch,
                       {"root", "'x'", "root 0 on rank 0", "root 1 on rank 1"}));

  for (int root : {5, 2, -1}) {
    for (auto& r : reqs) r.root = root;
    EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                         {"'x'", "root rank " + std::to_string(root), "2 ranks"}))
        << "root " << root;
  }
}

TEST(MakeResponseTest, AllgatherFirstDimsAndErrors) {
  std::vector<Request> reqs = {req(0, OpType::kAllgather, {2, 4}),
                               req(1, OpType::kAllgather, {5, 4}),
                               req(2, OpType::kAllgather, {0, 4})};
  Response resp = make_response(reqs, {}, 3);
  ASSERT_FALSE(resp.is_error()) << resp.error;
  EXPECT_EQ(resp.first_dims, (std::vector<std::int64_t>{2, 5, 0}));
  EXPECT_EQ(resp.shapes, (std::vector<Shape>{{2, 4}}));

  reqs[1].shapes = {{5, 3}};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 3), ErrorCode::kMismatch,
                       {"allgather 'x'", "[2, 4] on rank 0", "[5, 3] on rank 1"}));

  reqs[1].shapes = {{}};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 3), ErrorCode::kInvalidArgument,
                       {"allgather 'x'", "0-d", "rank 1"}));
}

TEST(MakeResponseTest, AlltoallSplitsMatrix) {
  // Default equal splits.
  Response eq = make_response(same(2, OpType::kAlltoall, {4, 3}), {}, 2);
  ASSERT_FALSE(eq.is_error()) << eq.error;
  EXPECT_EQ(eq.splits, (std::vector<std::int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(eq.shapes, (std::vector<Shape>{{4, 3}}));

  // Row r is rank r's splits; ranks may mix explicit and default splits and dim 0.
  std::vector<Request> reqs = {req(0, OpType::kAlltoall, {6, 2}), req(1, OpType::kAlltoall, {4, 2}),
                               req(2, OpType::kAlltoall, {3, 2})};
  reqs[1].splits = {0, 3, 1};
  reqs[2].splits = {1, 1, 1};
  Response resp = make_response(reqs, {}, 3);
  ASSERT_FALSE(resp.is_error()) << resp.error;
  EXPECT_EQ(resp.splits, (std::vector<std::int64_t>{2, 2, 2, 0, 3, 1, 1, 1, 1}));
}

TEST(MakeResponseTest, AlltoallErrors) {
  auto reqs = same(2, OpType::kAlltoall, {4, 3});
  reqs[1].shapes = {{4, 2}};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kMismatch,
                       {"alltoall 'x'", "[4, 3] on rank 0", "[4, 2] on rank 1"}));

  reqs = same(2, OpType::kAlltoall, {4, 3});
  reqs[1].splits = {1, 1, 2};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"alltoall 'x'", "rank 1", "3 entries", "2 ranks"}));

  reqs[1].splits = {5, -1};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"alltoall 'x'", "rank 1", "splits[1] = -1", "negative"}));

  reqs[1].splits = {3, 2};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"alltoall 'x'", "rank 1", "sum to 5", "only 4"}));

  reqs = same(2, OpType::kAlltoall, {3, 3});
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"alltoall 'x'", "rank 0", "dimension 0 (3)", "2 ranks"}));

  reqs = same(2, OpType::kAlltoall, {});
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"alltoall 'x'", "0-d", "ranks 0, 1"}));
}

// Splits past INT64_MAX in total wrapped to a small sum and passed the row check.
TEST(MakeResponseTest, AlltoallSplitsThatWouldOverflowTheSum) {
  auto reqs = same(2, OpType::kAlltoall, {4, 3});
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  reqs[1].splits = {big, big};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"alltoall 'x'", "rank 1", "more than 4", "only 4"}));
  reqs[1].splits = {2, big - 1};
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"alltoall 'x'", "rank 1", "only 4"}));
}

// The mismatch message compares element counts of shapes from peers; huge dimensions
// must not overflow (UBSan: signed integer overflow), and two different saturated counts
// are not "the same number of elements".
TEST(MakeResponseTest, ShapeMismatchWithHugeDimensions) {
  auto reqs = same(2, OpType::kAllreduce, {std::int64_t{1} << 40, std::int64_t{1} << 30});
  reqs[1].shapes = {{std::int64_t{1} << 40, std::int64_t{1} << 40}};
  const Response resp = make_response(reqs, {}, 2);
  EXPECT_TRUE(is_error(resp, ErrorCode::kMismatch, {"allreduce 'x'", "rank 0", "rank 1"}));
  EXPECT_EQ(resp.error.find("the same number of elements"), std::string::npos) << resp.error;
}

// Ranks check their own dimensions before submitting, so a negative one is a corrupt
// message: refused before sizes are computed from it (allgather's rows, byte counts).
TEST(MakeResponseTest, NegativeDimensionsFromAPeerAreRefused) {
  for (OpType op : {OpType::kAllreduce, OpType::kAllgather, OpType::kAlltoall}) {
    auto reqs = same(2, op, {4, 3});
    reqs[1].shapes = {{-5, 3}};
    EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                         {"rank 1 sent the shape [-5, 3] with a negative dimension"}))
        << op_name(op);
  }
  auto reqs = same(2, OpType::kAllgather, {std::numeric_limits<std::int64_t>::max(), 1});
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"allgather 'x'", "more than 2^63 rows"}));
}

TEST(MakeResponseTest, ReducescatterRules) {
  auto reqs = same(2, OpType::kReducescatter, {5, 2});
  Response ok = make_response(reqs, {}, 2);
  ASSERT_FALSE(ok.is_error()) << ok.error;
  EXPECT_EQ(ok.shapes, (std::vector<Shape>{{5, 2}}));

  reqs = same(2, OpType::kReducescatter, {});
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"reducescatter 'x'", "0-d", "ranks 0, 1"}));

  reqs = same(2, OpType::kReducescatter);
  for (auto& r : reqs) r.reduce_op = ReduceOp::kMin;
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument,
                       {"reducescatter 'x'", "min", "not supported"}));
}

TEST(MakeResponseTest, BoolCannotBeAveragedOrScaled) {
  auto reqs = same(2);
  for (auto& r : reqs) {
    r.dtype = DataType::kBool;
    r.reduce_op = ReduceOp::kAverage;
  }
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument, {"'x'", "bool"}));
  for (auto& r : reqs) {
    r.reduce_op = ReduceOp::kSum;
    r.postscale = 2;
  }
  EXPECT_TRUE(is_error(make_response(reqs, {}, 2), ErrorCode::kInvalidArgument, {"'x'", "bool"}));
  for (auto& r : reqs) {
    r.reduce_op = ReduceOp::kMax;
    r.postscale = 1;
  }
  EXPECT_FALSE(make_response(reqs, {}, 2).is_error());
}

TEST(MakeResponseTest, JoinedRanks) {
  // Ops that need every rank fail, naming the joined rank.
  for (OpType op :
       {OpType::kAllgather, OpType::kBroadcast, OpType::kAlltoall, OpType::kReducescatter}) {
    std::vector<Request> reqs = {req(0, op, {4, 2}), req(2, op, {4, 2})};
    EXPECT_TRUE(is_error(make_response(reqs, {1}, 3), ErrorCode::kInvalidArgument,
                         {std::string(op_name(op)) + " 'x'", "rank 1", "joined"}))
        << op_name(op);
  }
  // Allreduce and barrier run with the joined ranks contributing zeros.
  Response ar = make_response({req(1)}, {2, 0}, 3);
  ASSERT_FALSE(ar.is_error()) << ar.error;
  EXPECT_EQ(ar.joined_ranks, (std::vector<std::int32_t>{2, 0}));
  EXPECT_EQ(ar.shapes, (std::vector<Shape>{{2, 3}}));
  Response barrier = make_response({req(0, OpType::kBarrier, {})}, {1}, 2);
  ASSERT_FALSE(barrier.is_error()) << barrier.error;
  EXPECT_EQ(barrier.joined_ranks, (std::vector<std::int32_t>{1}));
}

TEST(MessageTableTest, ReadyOnlyWhenAllRanksSubmitted) {
  MessageTable table(3);
  const auto t = Clock::now();
  EXPECT_TRUE(table.empty());
  table.add(req(0), t);
  table.add(req(2), t);
  EXPECT_FALSE(table.empty());
  EXPECT_TRUE(table.take_ready().empty());
  table.add(req(1), t);
  auto ready = table.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].name, "x");
  EXPECT_FALSE(ready[0].is_error()) << ready[0].error;
  EXPECT_TRUE(table.empty());
  EXPECT_TRUE(table.take_ready().empty());
}

TEST(MessageTableTest, FirstSeenOrderRegardlessOfSubmissionOrder) {
  MessageTable table(2);
  const auto t = Clock::now();
  table.add(req(0, OpType::kAllreduce, {1}, "a"), t);
  table.add(req(0, OpType::kAllreduce, {1}, "b"), t);
  table.add(req(0, OpType::kAllreduce, {1}, "c"), t);
  table.add(req(1, OpType::kAllreduce, {1}, "c"), t);
  table.add(req(1, OpType::kAllreduce, {1}, "b"), t);
  auto ready = table.take_ready();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].name, "b");
  EXPECT_EQ(ready[1].name, "c");
  table.add(req(1, OpType::kAllreduce, {1}, "d"), t);
  table.add(req(0, OpType::kAllreduce, {1}, "d"), t);
  table.add(req(1, OpType::kAllreduce, {1}, "a"), t);
  ready = table.take_ready();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].name, "a");
  EXPECT_EQ(ready[1].name, "d");
}

TEST(MessageTableTest, JoinedRankMakesNamesReadyWithoutIt) {
  MessageTable table(3);
  const auto t = Clock::now();
  Request join = req(1, OpType::kJoin, {});
  table.add(join, t);
  EXPECT_EQ(table.joined(), (std::vector<std::int32_t>{1}));
  table.add(req(0), t);
  table.add(req(2), t);
  auto ready = table.take_ready();
  ASSERT_EQ(ready.size(), 1u);  // no join response: ranks 0 and 2 have not joined
  EXPECT_EQ(ready[0].op, OpType::kAllreduce);
  EXPECT_EQ(ready[0].joined_ranks, (std::vector<std::int32_t>{1}));

  table.add(req(0, OpType::kAllgather, {1}, "g"), t);
  table.add(req(2, OpType::kAllgather, {1}, "g"), t);
  ready = table.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(is_error(ready[0], ErrorCode::kInvalidArgument, {"'g'", "rank 1"}));
}

TEST(MessageTableTest, JoinResponseWhenAllJoinedThenReset) {
  MessageTable table(3);
  const auto t = Clock::now();
  for (int r : {1, 2}) table.add(req(r, OpType::kJoin, {}), t);
  table.add(req(1, OpType::kJoin, {}), t);  // a repeated join does not count twice
  EXPECT_TRUE(table.take_ready().empty());
  table.add(req(0), t);  // the last rank's tensor completes before its join
  table.add(req(0, OpType::kJoin, {}), t);
  auto ready = table.take_ready();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].name, "x");
  EXPECT_FALSE(ready[0].is_error()) << ready[0].error;
  EXPECT_EQ(ready[1].op, OpType::kJoin);
  EXPECT_FALSE(ready[1].is_error());
  EXPECT_EQ(ready[1].last_joined, 0);
  EXPECT_TRUE(table.joined().empty());
  EXPECT_TRUE(table.empty());

  // Second round starts from scratch.
  table.add(req(2), t);
  EXPECT_TRUE(table.take_ready().empty());
  table.add(req(0), t);
  table.add(req(1), t);
  ready = table.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].joined_ranks.empty());
  for (int r : {0, 2}) table.add(req(r, OpType::kJoin, {}), t);
  EXPECT_TRUE(table.take_ready().empty());
  table.add(req(1, OpType::kJoin, {}), t);
  ready = table.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].op, OpType::kJoin);
  EXPECT_EQ(ready[0].last_joined, 1);
}

TEST(MessageTableTest, StallsListSubmittedAndMissingRanks) {
  MessageTable table(4);
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  table.add(req(0, OpType::kAllreduce, {1}, "old"), t0);
  table.add(req(2, OpType::kAllreduce, {1}, "old"), t0 + std::chrono::seconds(8));
  table.add(req(3, OpType::kAllreduce, {1}, "new"), t0 + std::chrono::seconds(9));
  table.add(req(1, OpType::kJoin, {}), t0);

  const auto now = t0 + std::chrono::seconds(10);
  auto stalls = table.stalls(now, 5);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].name, "old");
  EXPECT_EQ(stalls[0].submitted, (std::vector<int>{0, 2}));
  EXPECT_EQ(stalls[0].missing, (std::vector<int>{3}));  // rank 1 joined: not missing
  EXPECT_DOUBLE_EQ(stalls[0].seconds, 10.0);            // age from the first submission

  EXPECT_TRUE(table.stalls(now, 10.5).empty());
  stalls = table.stalls(now, 0.5);
  ASSERT_EQ(stalls.size(), 2u);
  EXPECT_EQ(stalls[1].name, "new");
  EXPECT_EQ(stalls[1].submitted, (std::vector<int>{3}));
  EXPECT_EQ(stalls[1].missing, (std::vector<int>{0, 2}));

  table.add(req(3, OpType::kAllreduce, {1}, "old"), now);
  ASSERT_EQ(table.take_ready().size(), 1u);
  stalls = table.stalls(now, 0);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].name, "new");
}

// The coordinator knows who sent each request list; a request in another rank's name
// (or with a rank outside the job) is refused, adding nothing, and the error names both.
TEST(MessageTableTest, AddFromRefusesRequestsInAnotherRanksName) {
  MessageTable table(2);
  const auto t = Clock::time_point{} + std::chrono::hours(1);
  Status s = table.add_from(1, {req(1, OpType::kAllreduce, {1}, "a"), req(0)}, t);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 1 sent a request for 'x' in the name of rank 0"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(table.empty());  // all or nothing: 'a' was not added either

  s = table.add_from(1, {req(7)}, t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 7"), std::string::npos) << s.message();
  EXPECT_TRUE(table.empty());

  ASSERT_TRUE(table.add_from(0, {req(0)}, t).ok());
  ASSERT_TRUE(table.add_from(1, {req(1)}, t).ok());
  EXPECT_EQ(table.take_ready().size(), 1u);
}

TEST(ReducescatterRowsTest, FirstRanksGetTheRemainder) {
  EXPECT_EQ(reducescatter_rows(10, 4, 0), 3);
  EXPECT_EQ(reducescatter_rows(10, 4, 1), 3);
  EXPECT_EQ(reducescatter_rows(10, 4, 2), 2);
  EXPECT_EQ(reducescatter_rows(10, 4, 3), 2);
  EXPECT_EQ(reducescatter_rows(2, 4, 1), 1);
  EXPECT_EQ(reducescatter_rows(2, 4, 2), 0);
}

TEST(ReducescatterRowsTest, PartsSumToRowsAndDifferByAtMostOne) {
  for (int size = 1; size <= 17; ++size) {
    for (std::int64_t rows = 0; rows <= 100; ++rows) {
      std::int64_t sum = 0;
      for (int r = 0; r < size; ++r) {
        const std::int64_t n = reducescatter_rows(rows, size, r);
        sum += n;
        if (r > 0) {
          const std::int64_t prev = reducescatter_rows(rows, size, r - 1);
          ASSERT_TRUE(prev == n || prev == n + 1) << rows << " rows, size " << size;
        }
      }
      ASSERT_EQ(sum, rows) << "size " << size;
    }
  }
}

}  // namespace
}  // namespace kolo::core
