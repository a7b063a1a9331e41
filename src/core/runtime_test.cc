// Runtime behaviour over the inproc transport: submission order, many operations in
// flight, the response cache, handles, unnamed operations and shutdown.
#include "core/runtime.h"
#include "core/ops.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "core/testing/ranks.h"

namespace kolo::core {
namespace {

using testing::run_ranks;
using testing::test_config;
using testing::view_of;

AllreduceOptions sum(const std::string& name) {
  AllreduceOptions o;
  o.name = name;
  o.op = ReduceOp::kSum;
  return o;
}

Handle allreduce(Runtime& rt, std::vector<float>& v, const AllreduceOptions& o) {
  return ops::allreduce(rt, {view_of(v, DataType::kFloat32)}, {view_of(v, DataType::kFloat32)}, o,
                        false);
}

TEST(RuntimeTest, RanksSubmittingInDifferentOrdersGetTheSameResults) {
  for (int n : {2, 3, 4}) {
    run_ranks(n, test_config(), [n](int rank, Runtime& rt) {
      constexpr int kTensors = 40;
      std::vector<int> order(kTensors);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(1234 + rank));  // differs per rank
      std::vector<std::vector<float>> data(kTensors);
      std::vector<Handle> handles(kTensors);
      for (int t : order) {
        data[t].assign(t + 1, static_cast<float>(rank + t));
        handles[t] = allreduce(rt, data[t], sum(std::string("tensor.").append(std::to_string(t))));
      }
      for (int t = 0; t < kTensors; ++t) {
        handles[t].wait();
        const float want = n * (n - 1) / 2.0f + n * t;
        for (float x : data[t]) ASSERT_EQ(x, want) << "tensor " << t << " rank " << rank;
      }
    });
  }
}

TEST(RuntimeTest, ManyOperationsInFlightAtOnce) {
  run_ranks(4, test_config(), [](int rank, Runtime& rt) {
    constexpr int kTensors = 500;
    std::vector<std::vector<float>> data(kTensors);
    std::vector<Handle> handles;
    for (int t = 0; t < kTensors; ++t) {
      data[t].assign(1 + t % 17, static_cast<float>(rank));
      handles.push_back(allreduce(rt, data[t], sum("many." + std::to_string(t))));
    }
    for (int t = 0; t < kTensors; ++t) {
      handles[t].wait();
      for (float x : data[t]) ASSERT_EQ(x, 6.0f);
    }
  });
}

TEST(RuntimeTest, SteadyStateUsesTheResponseCache) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    for (int step = 0; step < 30; ++step) {
      std::vector<std::vector<float>> grads(5,
                                            std::vector<float>(8, static_cast<float>(rank + step)));
      std::vector<Handle> hs;
      for (int g = 0; g < 5; ++g)
        hs.push_back(allreduce(rt, grads[g], sum("grad." + std::to_string(g))));
      for (int g = 0; g < 5; ++g) {
        hs[g].wait();
        for (float x : grads[g]) ASSERT_EQ(x, 3.0f + 3 * step);
      }
    }
    // 30 steps of 5 names: the first step negotiates, most later steps take the fast path.
    EXPECT_GT(rt.fast_cycles(), 10u) << "rank " << rank;
  });
}

TEST(RuntimeTest, CacheDisabledStillWorksWithoutFastPath) {
  Config c = test_config();
  c.cache_capacity = 0;
  run_ranks(2, c, [](int rank, Runtime& rt) {
    for (int step = 0; step < 10; ++step) {
      std::vector<float> v(4, static_cast<float>(rank));
      allreduce(rt, v, sum("g")).wait();
      for (float x : v) ASSERT_EQ(x, 1.0f);
    }
    EXPECT_EQ(rt.fast_cycles(), 0u);
  });
}

TEST(RuntimeTest, TinyCacheEvictsAndStaysCorrect) {
  Config c = test_config();
  c.cache_capacity = 2;
  run_ranks(3, c, [](int rank, Runtime& rt) {
    for (int step = 0; step < 20; ++step) {
      std::vector<std::vector<float>> v(5, std::vector<float>(3, static_cast<float>(rank)));
      std::vector<Handle> hs;
      // Rank-dependent order makes hits, misses and evictions interleave differently.
      for (int k = 0; k < 5; ++k) {
        const int g = (k + rank * step) % 5;
        hs.push_back(allreduce(rt, v[g], sum("e" + std::to_string(g))));
      }
      for (auto& h : hs) h.wait();
      for (auto& t : v) {
        for (float x : t) ASSERT_EQ(x, 3.0f);
      }
    }
  });
}

TEST(RuntimeTest, CachedNameWithNewShapeIsRenegotiated) {
  run_ranks(2, test_config(), [](int rank, Runtime& rt) {
    for (int len : {4, 4, 6, 6, 2}) {
      std::vector<float> v(len, 1.0f + rank);
      allreduce(rt, v, sum("reshaped")).wait();
      for (float x : v) ASSERT_EQ(x, 3.0f);
    }
    // Cached on both ranks, then rank 1 changes shape alone: a mismatch on both ranks.
    std::vector<float> v(rank == 0 ? 2 : 3, 1.0f);
    Handle h = allreduce(rt, v, sum("reshaped"));
    EXPECT_FALSE(h.wait_for(std::chrono::seconds(10)) && h.ok());
    EXPECT_EQ(h.error_code(), ErrorCode::kMismatch);
    EXPECT_NE(h.error_message().find("[2] on rank 0; [3] on rank 1"), std::string::npos)
        << h.error_message();
  });
}

TEST(RuntimeTest, UnnamedOperationsGetDeterministicNames) {
  run_ranks(2, test_config(), [](int rank, Runtime& rt) {
    std::vector<float> a(2, 1.0f), b(2, 2.0f);
    Handle h1 = allreduce(rt, a, AllreduceOptions{});
    Handle h2 = allreduce(rt, b, AllreduceOptions{});
    EXPECT_EQ(h1.name(), "allreduce.noname.0");
    EXPECT_EQ(h2.name(), "allreduce.noname.1");
    h1.wait();
    h2.wait();
    EXPECT_EQ(a[0], 1.0f);  // average of equal values
    EXPECT_EQ(b[0], 2.0f);
    (void)rank;
  });
}

TEST(RuntimeTest, HandleTimesAreOrdered) {
  run_ranks(2, test_config(), [](int rank, Runtime& rt) {
    std::vector<float> v(16, static_cast<float>(rank));
    Handle h = allreduce(rt, v, sum("timed"));
    h.wait();
    const auto t = h.times();
    EXPECT_LE(t.enqueued, t.started);
    EXPECT_LE(t.started, t.finished);
    EXPECT_TRUE(h.poll());
  });
}

TEST(RuntimeTest, PendingOperationsFailWhenARankShutsDown) {
  run_ranks(2, test_config(), [](int rank, Runtime& rt) {
    std::vector<float> v(4, 1.0f);
    if (rank == 0) {
      Handle h = allreduce(rt, v, sum("never-matched"));
      ASSERT_TRUE(h.wait_for(std::chrono::seconds(10)));
      EXPECT_EQ(h.error_code(), ErrorCode::kShutdown);
      // The error names the rank that stopped and how.
      EXPECT_NE(h.error_message().find("rank 1 called kolo::shutdown(), while this rank "
                                       "waited for it"),
                std::string::npos)
          << h.error_message();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      rt.shutdown();
      EXPECT_THROW(allreduce(rt, v, sum("after")), Error);
    }
  });
}

// A program that ends without kolo::shutdown() stops its runtime at exit; the others'
// pending operations name it and say that it left (before, no rank was named).
TEST(RuntimeTest, PendingOperationsNameARankWhoseProgramEnded) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    std::vector<float> v(4, 1.0f);
    if (rank != 2) {
      Handle h = allreduce(rt, v, sum("waits-for-rank-2"));
      ASSERT_TRUE(h.wait_for(std::chrono::seconds(10)));
      EXPECT_EQ(h.error_code(), ErrorCode::kShutdown);
      EXPECT_NE(h.error_message().find("rank 2 left: the program ended (returned from main "
                                       "or called exit()) without kolo::shutdown()"),
                std::string::npos)
          << h.error_message();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      rt.shutdown(/*at_exit=*/true);
    }
  });
}

}  // namespace
}  // namespace kolo::core
