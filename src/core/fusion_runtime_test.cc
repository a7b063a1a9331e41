// Fusion through the whole runtime: fused allreduces give the same bytes as unfused ones
// for every dtype and op, mixed dtypes and scalings in one cycle, and thresholds that cut
// a cycle into several fused buffers. Ranks are threads over the inproc transport, whose
// reduction order does not depend on buffer offsets, so results must be bit-identical.
#include <cmath>
#include <cstring>
#include <map>

#include "core/ops.h"
#include "core/testing/ranks.h"
#include "core/testing/values.h"

namespace kolo::core {
namespace {

using namespace testing;  // NOLINT: test helpers

// Which tensors get prescale 0.5 and postscale 3: float sums and averages of 7 elements.
bool scaled_case(DataType dtype, ReduceOp op, std::int64_t count) {
  return is_float(dtype) && (op == ReduceOp::kSum || op == ReduceOp::kAverage) && count == 7;
}

using Results = std::map<std::string, std::vector<std::byte>>;

struct Outcome {
  std::vector<Results> per_rank;
  std::uint64_t fused = 0;  // fused responses on rank 0
};

// Every rank submits, in one cycle, every dtype x op at a few sizes (in place and not,
// with and without pre/postscale), then waits and records each output's bytes.
Outcome run_all(int n, std::int64_t threshold) {
  Config config = test_config();
  config.fusion_threshold_bytes = threshold;
  Outcome outcome;
  outcome.per_rank.resize(n);
  run_ranks(n, config, [&](int rank, Runtime& rt) {
    struct Op {
      std::string name;
      DataType dtype;
      Tensor in, out;
      Handle h;
    };
    std::vector<Op> ops;
    for (int round = 0; round < 2; ++round) {  // round 1 takes the response-cache fast path
      ops.clear();
      rt.hold_requests(true);
      int k = 0;
      for (std::int64_t count : {1, 7, 1000}) {
        for (DataType dtype : kAllDtypes) {
          for (ReduceOp op : kAllOps) {
            if (dtype == DataType::kBool && op == ReduceOp::kAverage) continue;
            ++k;
            AllreduceOptions o;
            o.name = std::string("t.") + dtype_name(dtype) + "." + reduce_op_name(op) + "." +
                     std::to_string(count);
            o.op = op;
            const bool scaled = scaled_case(dtype, op, count);
            if (scaled) {
              o.prescale_factor = 0.5;
              o.postscale_factor = 3.0;
            }
            Op x{o.name, dtype, Tensor(dtype, {count}), Tensor(dtype, {count}), {}};
            for (std::int64_t i = 0; i < count; ++i) {
              set_value(x.in.data(), dtype, i, test_value(rank, i, dtype, op, round));
            }
            const bool in_place = k % 2 == 0;
            TensorView out = in_place ? x.in.view() : x.out.view();
            x.h = ops::allreduce(rt, {x.in.view()}, {out}, o, false);
            if (in_place) std::swap(x.in, x.out);
            ops.push_back(std::move(x));
          }
        }
      }
      rt.hold_requests(false);
      for (auto& x : ops) {
        x.h.wait();
        const auto* p = static_cast<const std::byte*>(x.out.data());
        outcome.per_rank[rank][x.name + "." + std::to_string(round)] =
            std::vector<std::byte>(p, p + x.out.nbytes());
      }
    }
    if (rank == 0) outcome.fused = rt.fused_responses();
  });
  return outcome;
}

class FusionRuntime : public ::testing::TestWithParam<int> {};

TEST_P(FusionRuntime, FusedResultsEqualUnfusedForEveryDtypeAndOp) {
  const int n = GetParam();
  const Outcome unfused = run_all(n, 0);
  const Outcome fused = run_all(n, std::int64_t{64} << 20);
  const Outcome small = run_all(n, 256);  // many fused buffers per cycle
  EXPECT_EQ(unfused.fused, 0u);
  EXPECT_GT(fused.fused, 0u) << "nothing was fused although every request arrived in one cycle";
  EXPECT_GT(small.fused, 0u);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(unfused.per_rank[r].size(), fused.per_rank[r].size());
    for (const auto& [name, bytes] : unfused.per_rank[r]) {
      EXPECT_TRUE(fused.per_rank[r].at(name) == bytes) << name << " differs when fused, rank " << r;
      EXPECT_TRUE(small.per_rank[r].at(name) == bytes)
          << name << " differs with a 256-byte threshold, rank " << r;
    }
  }
}

TEST_P(FusionRuntime, FusedValuesMatchTheReference) {
  const int n = GetParam();
  const Outcome fused = run_all(n, std::int64_t{64} << 20);
  // Spot-check float32 sums (scaled and not) against the definition; the byte comparison
  // above covers the rest, and collectives_test checks the unfused path against references.
  for (std::int64_t count : {1, 7, 1000}) {
    const auto& bytes = fused.per_rank[n - 1].at("t.float32.sum." + std::to_string(count) + ".0");
    for (std::int64_t i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += test_value(r, i, DataType::kFloat32, ReduceOp::kSum, 0);
      if (scaled_case(DataType::kFloat32, ReduceOp::kSum, count)) want *= 0.5 * 3.0;
      const double got = get_value(bytes.data(), DataType::kFloat32, i);
      ASSERT_NEAR(got, want, 1e-5 * std::abs(want) + 1e-6) << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, FusionRuntime, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace kolo::core

namespace kolo::core {
namespace {

// Compressed allreduces (float32/float64 as float16/bfloat16 on the wire), alone and fused
// with uncompressed and native float16 tensors: results within the wire type's precision
// of the exact average, and a rank passing another compression gets a mismatch error.
TEST(CompressionRuntime, CompressedAllreducesMatchTheReferenceWithinWirePrecision) {
  for (std::int64_t threshold : {std::int64_t{0}, std::int64_t{64} << 20}) {
    Config config = testing::test_config();
    config.fusion_threshold_bytes = threshold;
    testing::run_ranks(3, config, [&](int rank, Runtime& rt) {
      rt.hold_requests(true);
      struct Case {
        Compression c;
        DataType dtype;
        Tensor t;
        Handle h;
      };
      std::vector<Case> cases;
      int k = 0;
      for (Compression c : {Compression::kFP16, Compression::kBF16, Compression::kNone}) {
        for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
          Case x{c, dtype, Tensor(dtype, {257}), {}};
          for (int i = 0; i < 257; ++i)
            testing::set_value(x.t.data(), dtype, i, 0.25 * (rank + 1) * (i % 17));
          AllreduceOptions o;
          o.name = "c" + std::to_string(k++);
          o.op = ReduceOp::kAverage;
          o.compression = c;
          o.prescale_factor = 2.0;
          x.h = ops::allreduce(rt, {x.t.view()}, {x.t.view()}, o, false);
          cases.push_back(std::move(x));
        }
      }
      rt.hold_requests(false);
      for (auto& x : cases) {
        x.h.wait();
        const bool narrow = x.c != Compression::kNone || x.dtype == DataType::kFloat16;
        const double tol = narrow ? (x.c == Compression::kBF16 ? 1e-2 : 2e-3) : 1e-6;
        for (int i = 0; i < 257; ++i) {
          const double want = 2.0 * 0.25 * (1 + 2 + 3) * (i % 17) / 3;
          ASSERT_NEAR(testing::get_value(x.t.data(), x.dtype, i), want, tol * std::abs(want) + 1e-6)
              << x.h.name() << " " << dtype_name(x.dtype) << " element " << i << " threshold "
              << threshold;
        }
      }
    });
  }
}

TEST(CompressionRuntime, MismatchedCompressionFailsOnEveryRankNamingIt) {
  testing::run_ranks(2, testing::test_config(), [](int rank, Runtime& rt) {
    std::vector<float> v(4, 1.0f);
    AllreduceOptions o;
    o.name = "grad.w";
    o.compression = rank == 0 ? Compression::kFP16 : Compression::kNone;
    Handle h = ops::allreduce(rt, {testing::view_of(v, DataType::kFloat32)},
                              {testing::view_of(v, DataType::kFloat32)}, o, false);
    h.wait_for(std::chrono::seconds(20));
    ASSERT_TRUE(h.poll());
    EXPECT_FALSE(h.ok());
    EXPECT_NE(h.error_message().find("compression"), std::string::npos) << h.error_message();
    EXPECT_NE(h.error_message().find("grad.w"), std::string::npos) << h.error_message();
  });
}

}  // namespace
}  // namespace kolo::core
