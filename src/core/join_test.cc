// join(): ranks that run out of data contribute the op's identity (zeros for sums) to the
// others' allreduces until every rank has joined; join returns the last rank to join on every rank.
#include "core/ops.h"
#include "core/testing/ranks.h"

namespace kolo::core {
namespace {

using testing::run_ranks;
using testing::test_config;
using testing::view_of;

Handle allreduce(Runtime& rt, std::vector<float>& v, const std::string& name, ReduceOp op) {
  AllreduceOptions o;
  o.name = name;
  o.op = op;
  return ops::allreduce(rt, {view_of(v, DataType::kFloat32)}, {view_of(v, DataType::kFloat32)}, o,
                        false);
}

// Rank `first` joins at once; the others run a few allreduces, then join one at a time
// in rank order (a barrier between joins fixes the order), twice in a row.
void run_join(int n, int first) {
  run_ranks(n, test_config(), [n, first](int rank, Runtime& rt) {
    std::vector<int> order;
    for (int r = 0; r < n; ++r) {
      if (r != first) order.push_back(r);
    }
    const int expected_last = order.empty() ? first : order.back();
    for (int round = 0; round < 2; ++round) {
      const std::string tag = "r" + std::to_string(round) + ".";
      if (rank == first) {
        Handle j = ops::join(rt);
        j.wait();
        EXPECT_EQ(j.last_joined_rank(), expected_last) << "rank " << rank;
        continue;
      }
      float others = 0;
      for (int r : order) others += r + 1.0f;
      for (int step = 0; step < 3; ++step) {
        std::vector<float> s(5, rank + 1.0f), a(5, rank + 1.0f);
        Handle hs = allreduce(rt, s, tag + "sum" + std::to_string(step), ReduceOp::kSum);
        Handle ha = allreduce(rt, a, tag + "avg" + std::to_string(step), ReduceOp::kAverage);
        hs.wait();
        ha.wait();
        for (float x : s) ASSERT_EQ(x, others) << "joined rank must contribute zeros";
        for (float x : a) ASSERT_FLOAT_EQ(x, others / n) << "average divides by the full size";
      }
      for (std::size_t k = 0; k < order.size(); ++k) {
        ops::barrier(rt, {}).wait();  // joined ranks take part in barriers too
        if (order[k] == rank) {
          Handle j = ops::join(rt);
          j.wait();
          EXPECT_EQ(j.last_joined_rank(), expected_last) << "rank " << rank;
          break;
        }
      }
    }
    // After everyone joined, the job goes on normally.
    std::vector<float> v(2, 1.0f);
    allreduce(rt, v, "after-join", ReduceOp::kSum).wait();
    EXPECT_EQ(v[0], static_cast<float>(n));
  });
}

TEST(JoinTest, EachRankInTurnJoinsFirst) {
  for (int n : {1, 2, 3, 4}) {
    for (int first = 0; first < n; ++first) {
      SCOPED_TRACE("size " + std::to_string(n) + ", first " + std::to_string(first));
      run_join(n, first);
    }
  }
}

// Min, max and product ignore a joined rank (it contributes +inf / -inf / 1, or the
// integer type's extremes), alone and fused with other allreduces, in float32 and int32.
TEST(JoinTest, JoinedRanksContributeTheIdentityOfMinMaxAndProduct) {
  const int n = 3, joined = 1;
  run_ranks(n, test_config(), [&](int rank, Runtime& rt) {
    if (rank == joined) {
      ops::join(rt).wait();
      return;
    }
    // Values of ranks 0 and 2 chosen so that a zero from the joined rank would change the
    // result: op, rank 0's value, rank 2's, the result.
    struct Case {
      ReduceOp op;
      float a, b, want;
    };
    const Case cases[] = {
        {ReduceOp::kMin, 2, 5, 2}, {ReduceOp::kMax, -3, -5, -3}, {ReduceOp::kProduct, -3, 5, -15}};
    for (int round = 0; round < 2; ++round) {  // the second round hits the response cache
      std::vector<std::vector<float>> f;
      std::vector<std::vector<std::int32_t>> i;
      for (const Case& c : cases) {
        const float mine = rank == 0 ? c.a : c.b;
        f.emplace_back(4, mine);
        i.emplace_back(4, static_cast<std::int32_t>(mine));
      }
      std::vector<Handle> handles;
      for (std::size_t k = 0; k < std::size(cases); ++k) {
        AllreduceOptions o;
        o.op = cases[k].op;
        o.name = std::string("f.") + reduce_op_name(o.op);
        handles.push_back(ops::allreduce(rt, {view_of(f[k], DataType::kFloat32)},
                                         {view_of(f[k], DataType::kFloat32)}, o, false));
        o.name = std::string("i.") + reduce_op_name(o.op);
        handles.push_back(ops::allreduce(rt, {view_of(i[k], DataType::kInt32)},
                                         {view_of(i[k], DataType::kInt32)}, o, false));
      }
      for (auto& h : handles) h.wait();
      for (std::size_t k = 0; k < std::size(cases); ++k) {
        for (float x : f[k]) ASSERT_EQ(x, cases[k].want) << reduce_op_name(cases[k].op);
        for (std::int32_t x : i[k])
          ASSERT_EQ(x, static_cast<std::int32_t>(cases[k].want)) << reduce_op_name(cases[k].op);
      }
    }
    ops::join(rt).wait();
  });
}

TEST(JoinTest, CollectivesThatNeedEveryRankFailWhileARankHasJoined) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    if (rank == 1) {
      EXPECT_EQ(ops::join(rt).wait_for(std::chrono::seconds(20)), true);
      return;
    }
    Tensor t(DataType::kFloat32, {2, 2});
    std::vector<Handle> hs;
    AllgatherOptions g;
    g.name = "g";
    hs.push_back(ops::allgather(rt, t.view(), g));
    BroadcastOptions b;
    b.name = "b";
    hs.push_back(ops::broadcast(rt, t.view(), b));
    AlltoallOptions a;
    a.name = "a";
    a.splits = {1, 0, 1};
    hs.push_back(ops::alltoall(rt, t.view(), a));
    ReducescatterOptions r;
    r.name = "r";
    hs.push_back(ops::reducescatter(rt, t.view(), r));
    for (auto& h : hs) {
      ASSERT_TRUE(h.wait_for(std::chrono::seconds(20)));
      EXPECT_EQ(h.error_code(), ErrorCode::kInvalidArgument) << h.error_message();
      EXPECT_NE(h.error_message().find("rank 1 has joined"), std::string::npos)
          << h.error_message();
    }
    ops::join(rt).wait();
  });
}

}  // namespace
}  // namespace kolo::core
