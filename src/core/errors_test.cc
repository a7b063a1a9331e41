// Every user error of the runtime, end to end over the inproc transport: each fails on
// every rank involved with a message naming the tensor, ranks and values, and the job
// goes on with the next operation.
#include <functional>

#include "core/ops.h"
#include "core/testing/ranks.h"

namespace kolo::core {
namespace {

using testing::run_ranks;
using testing::test_config;
using testing::view_of;

using Submit = std::function<Handle(int rank, Runtime& rt, Tensor& scratch)>;

// Runs `submit` on `n` ranks; every rank's handle must fail with `code` and a message
// containing each of `parts`. Then an allreduce must still work.
void expect_error_everywhere(int n, const Submit& submit, ErrorCode code,
                             const std::vector<std::string>& parts) {
  run_ranks(n, test_config(), [&](int rank, Runtime& rt) {
    Tensor scratch;
    Handle h = submit(rank, rt, scratch);
    ASSERT_TRUE(h.wait_for(std::chrono::seconds(20))) << "rank " << rank << " hung";
    EXPECT_EQ(h.error_code(), code) << "rank " << rank << ": " << h.error_message();
    for (const auto& p : parts) {
      EXPECT_NE(h.error_message().find(p), std::string::npos)
          << "rank " << rank << ": message lacks '" << p << "': " << h.error_message();
    }
    EXPECT_THROW(h.wait(), Error);
    std::vector<float> v(3, 1.0f);
    AllreduceOptions o;
    o.name = "after-error";
    o.op = ReduceOp::kSum;
    ops::allreduce(rt, {view_of(v, DataType::kFloat32)}, {view_of(v, DataType::kFloat32)}, o, false)
        .wait();
    EXPECT_EQ(v[0], static_cast<float>(n));
  });
}

Handle allreduce_of(Runtime& rt, Tensor& t, DataType dtype, std::vector<std::int64_t> shape,
                    AllreduceOptions o) {
  t = Tensor(dtype, std::move(shape));
  if (o.name.empty()) o.name = "x";
  return ops::allreduce(rt, {t.view()}, {t.view()}, o, false);
}

TEST(ErrorsTest, MismatchedShape) {
  expect_error_everywhere(3,
                          [](int rank, Runtime& rt, Tensor& t) {
                            return allreduce_of(rt, t, DataType::kFloat32, {rank == 1 ? 5 : 4}, {});
                          },
                          ErrorCode::kMismatch,
                          {"allreduce 'x'", "[4] on ranks 0, 2", "[5] on rank 1"});
}

TEST(ErrorsTest, SameElementCountDifferentDimensions) {
  expect_error_everywhere(
      2,
      [](int rank, Runtime& rt, Tensor& t) {
        return allreduce_of(
            rt, t, DataType::kFloat32,
            rank == 0 ? std::vector<std::int64_t>{2, 3} : std::vector<std::int64_t>{3, 2}, {});
      },
      ErrorCode::kMismatch, {"[2, 3] on rank 0", "[3, 2] on rank 1", "same number of elements"});
}

TEST(ErrorsTest, MismatchedDtype) {
  expect_error_everywhere(
      2,
      [](int rank, Runtime& rt, Tensor& t) {
        return allreduce_of(rt, t, rank == 0 ? DataType::kFloat32 : DataType::kFloat64, {4}, {});
      },
      ErrorCode::kMismatch, {"'x'", "float32 on rank 0", "float64 on rank 1"});
}

TEST(ErrorsTest, MismatchedOperation) {
  expect_error_everywhere(2,
                          [](int rank, Runtime& rt, Tensor& t) {
                            if (rank == 0) return allreduce_of(rt, t, DataType::kFloat32, {4}, {});
                            t = Tensor(DataType::kFloat32, {4});
                            BroadcastOptions o;
                            o.name = "x";
                            return ops::broadcast(rt, t.view(), o);
                          },
                          ErrorCode::kMismatch,
                          {"'x'", "allreduce on rank 0", "broadcast on rank 1"});
}

TEST(ErrorsTest, MismatchedReduceOp) {
  expect_error_everywhere(2,
                          [](int rank, Runtime& rt, Tensor& t) {
                            AllreduceOptions o;
                            o.op = rank == 0 ? ReduceOp::kSum : ReduceOp::kMax;
                            return allreduce_of(rt, t, DataType::kFloat32, {4}, o);
                          },
                          ErrorCode::kMismatch, {"reduce ops", "sum on rank 0", "max on rank 1"});
}

TEST(ErrorsTest, MismatchedPrescaleAndPostscale) {
  expect_error_everywhere(2,
                          [](int rank, Runtime& rt, Tensor& t) {
                            AllreduceOptions o;
                            o.prescale_factor = rank == 0 ? 1.0 : 0.5;
                            return allreduce_of(rt, t, DataType::kFloat32, {4}, o);
                          },
                          ErrorCode::kMismatch, {"prescale", "1 on rank 0", "0.5 on rank 1"});
  expect_error_everywhere(2,
                          [](int rank, Runtime& rt, Tensor& t) {
                            AllreduceOptions o;
                            o.postscale_factor = rank == 0 ? 2.0 : 3.0;
                            return allreduce_of(rt, t, DataType::kFloat32, {4}, o);
                          },
                          ErrorCode::kMismatch, {"postscale", "2 on rank 0", "3 on rank 1"});
}

TEST(ErrorsTest, MismatchedBroadcastRootAndRootOutOfRange) {
  expect_error_everywhere(2,
                          [](int rank, Runtime& rt, Tensor& t) {
                            t = Tensor(DataType::kInt32, {4});
                            BroadcastOptions o;
                            o.name = "b";
                            o.root = rank;
                            return ops::broadcast(rt, t.view(), o);
                          },
                          ErrorCode::kMismatch,
                          {"broadcast 'b'", "root 0 on rank 0", "root 1 on rank 1"});
  expect_error_everywhere(2,
                          [](int, Runtime& rt, Tensor& t) {
                            t = Tensor(DataType::kInt32, {4});
                            BroadcastOptions o;
                            o.name = "b";
                            o.root = 2;
                            return ops::broadcast(rt, t.view(), o);
                          },
                          ErrorCode::kInvalidArgument,
                          {"broadcast 'b'", "root rank 2 is out of range", "2 ranks"});
}

TEST(ErrorsTest, AllgatherAndAlltoallWithMismatchedTrailingDimensions) {
  expect_error_everywhere(2,
                          [](int rank, Runtime& rt, Tensor& t) {
                            t = Tensor(DataType::kFloat32, {2, rank == 0 ? 3 : 4});
                            AllgatherOptions o;
                            o.name = "g";
                            return ops::allgather(rt, t.view(), o);
                          },
                          ErrorCode::kMismatch,
                          {"allgather 'g'", "[2, 3] on rank 0", "[2, 4] on rank 1"});
  expect_error_everywhere(2,
                          [](int rank, Runtime& rt, Tensor& t) {
                            t = Tensor(DataType::kFloat32, {2, 2, rank == 0 ? 1 : 2});
                            AlltoallOptions o;
                            o.name = "a";
                            return ops::alltoall(rt, t.view(), o);
                          },
                          ErrorCode::kMismatch,
                          {"alltoall 'a'", "[2, 2, 1] on rank 0", "[2, 2, 2] on rank 1"});
}

TEST(ErrorsTest, BadAlltoallSplits) {
  struct Case {
    std::vector<std::int64_t> splits;
    std::string part;
  };
  for (const Case& c : {Case{{1, 1, 1}, "splits has 3 entries but there are 2 ranks"},
                        Case{{3, -1}, "splits[1] = -1 is negative"},
                        Case{{3, 2}, "splits sum to 5 rows but dimension 0 has only 4"},
                        Case{{}, "dimension 0 (3) does not divide evenly"}}) {
    expect_error_everywhere(2,
                            [&](int rank, Runtime& rt, Tensor& t) {
                              const bool bad = rank == 1;
                              t = Tensor(DataType::kFloat32, {bad && c.splits.empty() ? 3 : 4, 2});
                              AlltoallOptions o;
                              o.name = "a";
                              o.splits = bad ? c.splits : std::vector<std::int64_t>{2, 2};
                              return ops::alltoall(rt, t.view(), o);
                            },
                            ErrorCode::kInvalidArgument, {"alltoall 'a' on rank 1", c.part});
  }
}

// A layout past MPI's int byte counts fails on every rank, naming the rank and the
// sizes, although only rank 0 sends that much (the others used to wait for it until
// their deadline). The data is never read: the check comes before any transfer.
TEST(ErrorsTest, AlltoallPastIntByteCountsFailsEverywhere) {
  const std::int64_t rows = (std::int64_t{1} << 29) + 1;  // float32: 2 GiB + 4 bytes
  std::vector<float> small(4);
  expect_error_everywhere(
      2,
      [&](int rank, Runtime& rt, Tensor&) {
        AlltoallOptions o;
        o.name = "big";
        o.splits = rank == 0 ? std::vector<std::int64_t>{0, rows} : std::vector<std::int64_t>{0, 0};
        return ops::alltoall(rt, view_of(small.data(), DataType::kFloat32, {rank == 0 ? rows : 0}),
                             o);
      },
      ErrorCode::kInvalidArgument,
      {"alltoall 'big': rank 0 sends 536870913 rows (2147483652 bytes) to rank 1",
       "split the exchange"});
}

TEST(ErrorsTest, ZeroDimensionalReducescatterAndAllgather) {
  expect_error_everywhere(2,
                          [](int, Runtime& rt, Tensor& t) {
                            t = Tensor(DataType::kFloat32, {});
                            ReducescatterOptions o;
                            o.name = "r";
                            return ops::reducescatter(rt, t.view(), o);
                          },
                          ErrorCode::kInvalidArgument, {"reducescatter 'r'", "0-d", "ranks 0, 1"});
  expect_error_everywhere(2,
                          [](int rank, Runtime& rt, Tensor& t) {
                            t = Tensor(DataType::kFloat32, rank == 0
                                                               ? std::vector<std::int64_t>{}
                                                               : std::vector<std::int64_t>{1});
                            AllgatherOptions o;
                            o.name = "g";
                            return ops::allgather(rt, t.view(), o);
                          },
                          ErrorCode::kInvalidArgument, {"allgather 'g'", "0-d", "rank 0"});
}

TEST(ErrorsTest, CpuTensorOnSomeRanksAndGpuOnOthers) {
  expect_error_everywhere(3,
                          [](int rank, Runtime& rt, Tensor& t) {
                            t = Tensor(DataType::kFloat32, {4});
                            TensorView v = t.view();
                            if (rank == 2) v.device = DeviceKind::kCUDA;
                            AllreduceOptions o;
                            o.name = "dev";
                            return ops::allreduce(rt, {v}, {v}, o, false);
                          },
                          ErrorCode::kMismatch,
                          {"allreduce 'dev'", "cpu on ranks 0, 1", "cuda on rank 2"});
}

TEST(ErrorsTest, NameAlreadyInFlightFailsAtEnqueueOnThatRank) {
  run_ranks(2, test_config(), [](int rank, Runtime& rt) {
    std::vector<float> a(2, 1.0f), b(2, 1.0f);
    AllreduceOptions o;
    o.name = "dup";
    Handle h;
    if (rank == 0) {
      h = ops::allreduce(rt, {view_of(a, DataType::kFloat32)}, {view_of(a, DataType::kFloat32)}, o,
                         false);
      try {
        ops::allreduce(rt, {view_of(b, DataType::kFloat32)}, {view_of(b, DataType::kFloat32)}, o,
                       false);
        ADD_FAILURE() << "duplicate name accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kDuplicateName);
        EXPECT_NE(std::string(e.what()).find("'dup' is already in flight on rank 0"),
                  std::string::npos)
            << e.what();
      }
    }
    ops::barrier(rt, {}).wait();  // rank 1 submits only after rank 0 tried the duplicate
    if (rank == 1) {
      h = ops::allreduce(rt, {view_of(a, DataType::kFloat32)}, {view_of(a, DataType::kFloat32)}, o,
                         false);
    }
    h.wait();
    EXPECT_EQ(a[0], 1.0f);
  });
}

TEST(ErrorsTest, LocalArgumentErrorsThrowAtEnqueue) {
  run_ranks(1, test_config(), [](int, Runtime& rt) {
    std::vector<float> a(4);
    std::vector<double> b(4);
    EXPECT_THROW(ops::allreduce(rt, {view_of(a, DataType::kFloat32)},
                                {view_of(b, DataType::kFloat64)}, {}, false),
                 Error);
    EXPECT_THROW(ops::allreduce(rt, {}, {}, {}, true), Error);
    TensorView null_data = view_of(nullptr, DataType::kFloat32, {3});
    EXPECT_THROW(ops::allreduce(rt, {null_data}, {null_data}, {}, false), Error);
    AllgatherOptions other_set;
    other_set.process_set = 3;
    EXPECT_THROW(ops::allgather(rt, view_of(a, DataType::kFloat32), other_set), Error);
    // Negative dimensions even when their product is positive, and sizes past 64 bits.
    auto expect_invalid = [](const std::function<void()>& f, const std::string& part) {
      try {
        f();
        ADD_FAILURE() << "no error, expected one mentioning " << part;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    };
    AllgatherOptions neg;
    neg.name = "neg";
    expect_invalid(
        [&] {
          ops::allgather(rt, view_of(a.data(), DataType::kFloat32, {-2, -2}), neg);
        },
        "negative dimension [-2, -2]");
    AllreduceOptions huge;
    huge.name = "huge";
    TensorView big = view_of(a.data(), DataType::kFloat32, {std::int64_t{1} << 40, 1 << 22});
    expect_invalid([&] { ops::allreduce(rt, {big}, {big}, huge, false); },
                   "does not fit in 64 bits");
    // The fixed names of join() and barrier() are not tensor names.
    for (const char* reserved : {"join", "barrier"}) {
      AllreduceOptions o;
      o.name = reserved;
      expect_invalid(
          [&] {
            ops::allreduce(rt, {view_of(a, DataType::kFloat32)}, {view_of(a, DataType::kFloat32)},
                           o, false);
          },
          "reserved");
    }
  });
}

}  // namespace
}  // namespace kolo::core
