// Every collective over the inproc transport with 1, 2, 3, 4 and 8 ranks, every dtype,
// every op and sizes 0, 1, 7, 1024 and 1M elements, checked against a reference the
// test computes itself. KOLO_TEST_QUICK=1 (sanitizer runs) drops the 1M size.
#include <cmath>
#include <cstdlib>
#include <map>
#include <tuple>

#include "core/ops.h"
#include "core/testing/ranks.h"
#include "core/testing/values.h"

namespace kolo::core {
namespace {

using namespace testing;  // NOLINT: test helpers

std::vector<std::int64_t> sizes() {
  const char* quick = std::getenv("KOLO_TEST_QUICK");
  if (quick && std::string(quick) == "1") return {0, 1, 7, 1024};
  return {0, 1, 7, 1024, 1 << 20};
}

double expected_allreduce(int n, std::size_t i, DataType dtype, ReduceOp op, int salt = 0) {
  double acc = test_value(0, i, dtype, op, salt);
  for (int r = 1; r < n; ++r)
    acc = kolo::testing::fold_reference(op, acc, test_value(r, i, dtype, op, salt));
  if (dtype == DataType::kBool) return acc != 0;
  if (op == ReduceOp::kAverage) return is_float(dtype) ? acc / n : std::trunc(acc / n);
  return acc;
}

void expect_close(double got, double want, DataType dtype, const std::string& what) {
  const double tol = !is_float(dtype) ? 0
                     : (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16)
                         ? 1e-2 * std::abs(want) + 1e-3
                         : 1e-6 * std::abs(want) + 1e-7;
  ASSERT_LE(std::abs(got - want), tol) << what << ": got " << got << ", want " << want;
}

// Large outputs are checked on a stride (every element by some rank, the first 1024
// by every rank) so the reference does not cost size^2 per element.
bool checked(std::int64_t i, int rank, int n, std::int64_t count) {
  return count <= 4096 || i < 1024 || i % n == rank;
}

// Parameters: rank count, and fusion on (default threshold) or off.
class Collectives : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  static Config config() {
    Config c = test_config();
    if (!std::get<1>(GetParam())) c.fusion_threshold_bytes = 0;
    return c;
  }
};

// Allreduce of every dtype and op: for each size, all dtype/op combinations are in
// flight at once (1M: one dtype at a time to bound memory).
TEST_P(Collectives, AllreduceEveryDtypeOpAndSize) {
  const int n = std::get<0>(GetParam());
  run_ranks(n, config(), [n](int rank, Runtime& rt) {
    for (std::int64_t count : sizes()) {
      for (std::size_t batch = 0; batch < std::size(kAllDtypes); ++batch) {
        struct Op {
          DataType dtype;
          ReduceOp op;
          Tensor in, out;
          Handle h;
        };
        std::vector<Op> ops;
        for (std::size_t d = 0; d < std::size(kAllDtypes); ++d) {
          if (count >= (1 << 20) ? d != batch : batch != 0) continue;
          for (ReduceOp op : kAllOps) {
            const DataType dtype = kAllDtypes[d];
            if (dtype == DataType::kBool && op == ReduceOp::kAverage) continue;
            ops.push_back({dtype, op, Tensor(dtype, {count}), Tensor(dtype, {count}), {}});
          }
        }
        for (auto& o : ops) {
          for (std::int64_t i = 0; i < count; ++i)
            set_value(o.in.data(), o.dtype, i, test_value(rank, i, o.dtype, o.op));
          AllreduceOptions opt;
          opt.name = std::string("ar.") + dtype_name(o.dtype) + "." + reduce_op_name(o.op) + "." +
                     std::to_string(count);
          opt.op = o.op;
          // Half the ops in place, half into a separate output.
          const bool in_place = (static_cast<int>(o.op) + static_cast<int>(o.dtype)) % 2 == 0;
          TensorView out = in_place ? o.in.view() : o.out.view();
          o.h = ops::allreduce(rt, {o.in.view()}, {out}, opt, false);
          if (in_place) std::swap(o.in, o.out);  // the result lands in `out` either way
        }
        for (auto& o : ops) {
          o.h.wait();
          const std::string what = o.h.name() + " on rank " + std::to_string(rank);
          for (std::int64_t i = 0; i < count; ++i) {
            if (!checked(i, rank, n, count)) continue;
            expect_close(get_value(o.out.data(), o.dtype, i),
                         expected_allreduce(n, i, o.dtype, o.op), o.dtype,
                         what + " element " + std::to_string(i));
          }
        }
      }
    }
  });
}

TEST_P(Collectives, AllgatherEveryDtypeWithUnevenFirstDims) {
  const int n = std::get<0>(GetParam());
  run_ranks(n, config(), [n](int rank, Runtime& rt) {
    for (std::int64_t base : sizes()) {
      const std::int64_t rows_base = base / 3;  // rows of 3 elements
      for (DataType dtype : kAllDtypes) {
        auto rows_of = [&](int r) { return rows_base + r % 3; };
        Tensor in(dtype, {rows_of(rank), 3});
        for (std::int64_t i = 0; i < in.numel(); ++i)
          set_value(in.data(), dtype, i, test_value(rank, i, dtype, ReduceOp::kMax));
        AllgatherOptions o;
        o.name = std::string("ag.") + dtype_name(dtype) + "." + std::to_string(base);
        Handle h = ops::allgather(rt, in.view(), o);
        h.wait();
        const Tensor& out = h.output();
        std::int64_t total = 0;
        for (int r = 0; r < n; ++r) total += rows_of(r);
        ASSERT_EQ(out.shape(), (std::vector<std::int64_t>{total, 3}));
        std::size_t k = 0;
        for (int r = 0; r < n; ++r) {
          for (std::int64_t i = 0; i < rows_of(r) * 3; ++i, ++k) {
            if (!checked(static_cast<std::int64_t>(k), rank, n, out.numel())) continue;
            ASSERT_EQ(get_value(out.data(), dtype, k), test_value(r, i, dtype, ReduceOp::kMax))
                << o.name;
          }
        }
      }
    }
  });
}

TEST_P(Collectives, BroadcastEveryDtypeFromEveryRoot) {
  const int n = std::get<0>(GetParam());
  run_ranks(n, config(), [n](int rank, Runtime& rt) {
    for (std::int64_t count : sizes()) {
      for (DataType dtype : kAllDtypes) {
        const int root = static_cast<int>((count + static_cast<int>(dtype)) % n);
        Tensor t(dtype, {count});
        for (std::int64_t i = 0; i < count; ++i)
          set_value(t.data(), dtype, i, test_value(rank, i, dtype, ReduceOp::kMax));
        BroadcastOptions o;
        o.name = std::string("bc.") + dtype_name(dtype) + "." + std::to_string(count);
        o.root = root;
        ops::broadcast(rt, t.view(), o).wait();
        for (std::int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(get_value(t.data(), dtype, i), test_value(root, i, dtype, ReduceOp::kMax))
              << o.name;
        }
      }
    }
  });
}

TEST_P(Collectives, AlltoallWithAndWithoutSplits) {
  const int n = std::get<0>(GetParam());
  run_ranks(n, config(), [n](int rank, Runtime& rt) {
    for (DataType dtype : kAllDtypes) {
      for (int scale : {0, 1, 7}) {
        // Rank r sends (r + j) % 3 * scale rows of 2 to rank j; row values encode (r, j, row).
        auto split = [&](int r, int j) { return std::int64_t((r + j) % 3) * scale; };
        std::vector<std::int64_t> splits;
        std::int64_t rows = 0;
        for (int j = 0; j < n; ++j) splits.push_back(split(rank, j)), rows += split(rank, j);
        Tensor in(dtype, {rows, 2});
        std::int64_t row = 0;
        auto code = [&](int r, int j, std::int64_t k) {
          return test_value(r * 16 + j, static_cast<std::size_t>(k), dtype, ReduceOp::kMax);
        };
        for (int j = 0; j < n; ++j) {
          for (std::int64_t k = 0; k < split(rank, j) * 2; ++k)
            set_value(in.data(), dtype, row * 2 + k, code(rank, j, k));
          row += split(rank, j);
        }
        AlltoallOptions o;
        o.name = std::string("a2a.") + dtype_name(dtype) + "." + std::to_string(scale);
        o.splits = splits;
        Handle h = ops::alltoall(rt, in.view(), o);
        h.wait();
        std::int64_t k_out = 0;
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(h.received_splits()[r], split(r, rank));
          for (std::int64_t k = 0; k < split(r, rank) * 2; ++k, ++k_out) {
            ASSERT_EQ(get_value(h.output().data(), dtype, k_out), code(r, rank, k)) << o.name;
          }
        }
        ASSERT_EQ(h.output().numel(), k_out);
      }
      // Without splits: dim 0 divides evenly, rank j gets block j.
      Tensor in(dtype, {2 * n, 3});
      for (std::int64_t i = 0; i < in.numel(); ++i)
        set_value(in.data(), dtype, i, test_value(rank, i, dtype, ReduceOp::kMax));
      AlltoallOptions o;
      o.name = std::string("a2a.even.") + dtype_name(dtype);
      Handle h = ops::alltoall(rt, in.view(), o);
      h.wait();
      ASSERT_EQ(h.output().shape(), (std::vector<std::int64_t>{2 * n, 3}));
      for (int r = 0; r < n; ++r) {
        for (std::int64_t k = 0; k < 6; ++k) {
          ASSERT_EQ(get_value(h.output().data(), dtype, r * 6 + k),
                    test_value(r, rank * 6 + k, dtype, ReduceOp::kMax));
        }
      }
    }
  });
}

TEST_P(Collectives, ReducescatterSplitsUnevenRowsLikeHorovod) {
  const int n = std::get<0>(GetParam());
  run_ranks(n, config(), [n](int rank, Runtime& rt) {
    for (std::int64_t count : sizes()) {
      const std::int64_t rows = count / 2 + 1;  // uneven over most rank counts
      for (DataType dtype : kAllDtypes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          if (dtype == DataType::kBool && op == ReduceOp::kAverage) continue;
          Tensor in(dtype, {rows, 2});
          for (std::int64_t i = 0; i < in.numel(); ++i)
            set_value(in.data(), dtype, i, test_value(rank, i, dtype, op));
          ReducescatterOptions o;
          o.name =
              std::string("rs.") + dtype_name(dtype) + reduce_op_name(op) + std::to_string(count);
          o.op = op;
          Handle h = ops::reducescatter(rt, in.view(), o);
          h.wait();
          std::int64_t first = 0;
          for (int r = 0; r < rank; ++r) first += rows / n + (r < rows % n ? 1 : 0);
          const std::int64_t mine = rows / n + (rank < rows % n ? 1 : 0);
          ASSERT_EQ(h.output().shape(), (std::vector<std::int64_t>{mine, 2}));
          for (std::int64_t i = 0; i < mine * 2; ++i) {
            expect_close(get_value(h.output().data(), dtype, i),
                         expected_allreduce(n, first * 2 + i, dtype, op), dtype, o.name);
          }
        }
      }
    }
  });
}

TEST_P(Collectives, PrescalePostscaleAndGroupedAllreduce) {
  const int n = std::get<0>(GetParam());
  run_ranks(n, config(), [n](int rank, Runtime& rt) {
    std::vector<float> a(10, 1.0f + rank), b(3, 2.0f);
    std::vector<std::int32_t> c(4, 6 * (rank + 1));
    AllreduceOptions o;
    o.name = "scaled";
    o.op = ReduceOp::kSum;
    o.prescale_factor = 0.5;
    o.postscale_factor = 3.0;
    ops::allreduce(rt, {view_of(a, DataType::kFloat32)}, {view_of(a, DataType::kFloat32)}, o, false)
        .wait();
    const float sum = n * (n + 1) / 2.0f;  // sum of 1 + rank
    for (float x : a) EXPECT_FLOAT_EQ(x, sum * 0.5f * 3.0f);

    std::vector<float> a2(10, 1.0f + rank), b_out(3);
    AllreduceOptions g;
    g.name = "group";
    g.op = ReduceOp::kAverage;
    ops::allreduce(rt, {view_of(a2, DataType::kFloat32), view_of(b, DataType::kFloat32)},
                   {view_of(a2, DataType::kFloat32), view_of(b_out, DataType::kFloat32)}, g, true)
        .wait();
    for (float x : a2) EXPECT_FLOAT_EQ(x, sum / n);
    for (float x : b_out) EXPECT_FLOAT_EQ(x, 2.0f);
    for (float x : b) EXPECT_FLOAT_EQ(x, 2.0f);  // input untouched

    AllreduceOptions i;
    i.name = "int-average";
    i.op = ReduceOp::kAverage;
    ops::allreduce(rt, {view_of(c, DataType::kInt32)}, {view_of(c, DataType::kInt32)}, i, false)
        .wait();
    for (auto x : c) EXPECT_EQ(x, 6 * n * (n + 1) / 2 / n);
    ops::barrier(rt, {}).wait();
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks" +
                                  (std::get<1>(info.param) ? "Fused" : "Unfused");
                         });

}  // namespace
}  // namespace kolo::core
