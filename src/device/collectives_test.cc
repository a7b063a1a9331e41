// The device layer's collectives (device.h's Collectives) on every device this build has
// (testing/test_devices.h), 1-4 ranks as threads of this process (CUDA: one rank, as the
// test machine has one GPU): every collective and dtype against a reference computed here
// in double, the unique id's exchange, abort, bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "common/reduce.h"
#include "device/testing/test_devices.h"

namespace kolo::device {
namespace {

using testing::TestDevice;

struct Case {
  TestDevice device;
  int ranks = 1;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.device.kind << " x" << c.ranks; }

// One rank's device, stream and communicator.
struct Rank {
  std::unique_ptr<Device> dev;
  std::unique_ptr<transport::Communicator> control;  // the CPU control plane
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Collectives> comm;
  // Waits for the stream's work so far.
  Status finish(double seconds = 20) {
    std::unique_ptr<Event> done;
    KOLO_RETURN_IF_ERROR(dev->create_event(&done));
    KOLO_RETURN_IF_ERROR(dev->record(*done, *stream));
    return dev->synchronize(*done, deadline_after(seconds));
  }
  // Device memory holding `host`'s bytes, copied back by out().
  struct Mem {
    Rank& r;
    void* ptr = nullptr;
    std::size_t bytes;
    Mem(Rank& rank, const void* host, std::size_t n) : r(rank), bytes(n) {
      EXPECT_TRUE(r.dev->allocate(n, &ptr).ok());
      if (host != nullptr) {
        EXPECT_TRUE(r.dev->copy(ptr, host, n, *r.stream).ok());
      }
    }
    ~Mem() {
      EXPECT_TRUE(r.finish().ok());
      r.dev->release(ptr);
    }
    void out(void* host) {
      ASSERT_TRUE(r.dev->copy(host, ptr, bytes, *r.stream).ok());
      ASSERT_TRUE(r.finish().ok());
    }
  };
};

// Runs fn(rank) on c.ranks threads, each with its own device, connected by
// connect_collectives() over an in-process control plane (the stand-in's collectives
// through an in-process fabric, or the CUDA-IPC path where the devices share a GPU).
void run_ranks(const Case& c, const std::function<void(Rank&)>& fn) {
  host::InprocFabric fabric;
  {
    std::unique_ptr<Device> probe;
    const Status st = c.device.make(0, 20, fabric.connector(), &probe);
    if (st.code() == ErrorCode::kUnsupported) GTEST_SKIP() << st.message();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  transport::InprocWorld control(c.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < c.ranks; ++r) {
    threads.emplace_back([&, r] {
      Rank rank;
      rank.control = control.communicator(r);
      ASSERT_TRUE(c.device.make(r, 20, fabric.connector(), &rank.dev).ok());
      ASSERT_TRUE(rank.dev->create_stream(&rank.stream).ok());
      const Status st = connect_collectives(*rank.dev, *rank.control, deadline_after(20),
                                            &rank.comm, c.device.connect);
      ASSERT_TRUE(st.ok()) << st.message();
      fn(rank);
    });
  }
  for (auto& t : threads) t.join();
}

// Small integers, exact in every dtype, and their reductions in double.
double value(int rank, std::size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return static_cast<double>(1 + (rank + i) % 2);
  return static_cast<double>((3 * rank + i) % 7);
}

void store(void* p, DataType t, std::size_t i, double v) {
  switch (t) {
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = v;
      break;
    case DataType::kFloat16:
      static_cast<std::uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<std::uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DataType::kInt8:
      static_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v);
      break;
    case DataType::kUInt8:
      static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v);
      break;
    case DataType::kInt32:
      static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
      break;
    case DataType::kBool:
      static_cast<bool*>(p)[i] = v != 0;
      break;
  }
}

double load(const void* p, DataType t, std::size_t i) {
  switch (t) {
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
    case DataType::kFloat16:
      return half_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return bfloat16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DataType::kInt8:
      return static_cast<const std::int8_t*>(p)[i];
    case DataType::kUInt8:
      return static_cast<const std::uint8_t*>(p)[i];
    case DataType::kInt32:
      return static_cast<const std::int32_t*>(p)[i];
    case DataType::kInt64:
      return static_cast<const std::int64_t*>(p)[i];
    case DataType::kBool:
      return static_cast<const bool*>(p)[i] ? 1 : 0;
  }
  return 0;
}

double reference(int ranks, std::size_t i, ReduceOp op, DataType t) {
  double acc = value(0, i, op);
  for (int r = 1; r < ranks; ++r) {
    const double v = value(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (t == DataType::kBool) {
    // kolo's bool reductions: sum/max are or, product/min are and.
    bool any = false, all = true;
    for (int r = 0; r < ranks; ++r) {
      any |= value(r, i, op) != 0;
      all &= value(r, i, op) != 0;
    }
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? any : all;
  }
  if (op == ReduceOp::kAverage) {
    acc /= ranks;
    const bool integer = t != DataType::kFloat32 && t != DataType::kFloat64 &&
                         t != DataType::kFloat16 && t != DataType::kBFloat16;
    if (integer) acc = std::trunc(acc);
  }
  return acc;
}

constexpr DataType kTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                               DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                               DataType::kInt32,    DataType::kInt64,   DataType::kBool};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

class CollectivesTest : public ::testing::TestWithParam<Case> {};

TEST_P(CollectivesTest, AllreduceOfEveryOpAndDtypeMatchesTheReference) {
  const int n = GetParam().ranks;
  const std::size_t count = 37;
  run_ranks(GetParam(), [&](Rank& r) {
    const int me = r.comm->rank();
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        if (t == DataType::kBool && op == ReduceOp::kAverage) continue;  // refused upstream
        const std::size_t bytes = count * dtype_size(t);
        std::vector<unsigned char> host(bytes), recv(bytes), in_place(bytes);
        for (std::size_t i = 0; i < count; ++i) store(host.data(), t, i, value(me, i, op));
        Rank::Mem send(r, host.data(), bytes), out(r, nullptr, bytes);
        // Out of place, then in place (send == recv).
        ASSERT_TRUE(r.comm->allreduce(send.ptr, out.ptr, count, t, op, *r.stream).ok());
        ASSERT_TRUE(r.comm->allreduce(send.ptr, send.ptr, count, t, op, *r.stream).ok());
        out.out(recv.data());
        send.out(in_place.data());
        // Exact but for an average's rounding in the dtype (within two units of roundoff).
        const double eps = op != ReduceOp::kAverage   ? 0
                           : t == DataType::kFloat32  ? 1.2e-7
                           : t == DataType::kFloat64  ? 2.3e-16
                           : t == DataType::kFloat16  ? 9.8e-4
                           : t == DataType::kBFloat16 ? 7.8e-3
                                                      : 0;
        for (std::size_t i = 0; i < count; ++i) {
          const double want = reference(n, i, op, t);
          ASSERT_NEAR(load(recv.data(), t, i), want, eps * std::abs(want))
              << dtype_name(t) << " " << reduce_op_name(op) << " element " << i;
          ASSERT_NEAR(load(in_place.data(), t, i), want, eps * std::abs(want)) << "in place";
        }
      }
    }
  });
}

TEST_P(CollectivesTest, BroadcastAllgatherReducescatterAndAlltoallvMoveTheRightBytes) {
  const int n = GetParam().ranks;
  run_ranks(GetParam(), [&](Rank& r) {
    const int me = r.comm->rank();
    // broadcast from every root, out of place
    for (int root = 0; root < n; ++root) {
      std::vector<int> host(5, me * 10 + 1), got(5, -1);
      Rank::Mem send(r, host.data(), 5 * sizeof(int)), recv(r, got.data(), 5 * sizeof(int));
      ASSERT_TRUE(r.comm->broadcast(send.ptr, recv.ptr, 5 * sizeof(int), root, *r.stream).ok());
      recv.out(got.data());
      for (int v : got) ASSERT_EQ(v, root * 10 + 1);
    }
    // allgather and an uneven allgatherv: rank q gives q + 1 ints
    std::vector<int> mine(3, me), all(3 * static_cast<std::size_t>(n), -1);
    std::vector<std::size_t> bytes;
    std::size_t total = 0;
    for (int q = 0; q < n; ++q) {
      bytes.push_back(static_cast<std::size_t>(q + 1) * sizeof(int));
      total += static_cast<std::size_t>(q + 1);
    }
    std::vector<int> uneven(static_cast<std::size_t>(me + 1), 100 + me), gathered(total, -1);
    {
      Rank::Mem m(r, mine.data(), 3 * sizeof(int)), a(r, nullptr, all.size() * sizeof(int));
      Rank::Mem u(r, uneven.data(), uneven.size() * sizeof(int));
      Rank::Mem g(r, nullptr, total * sizeof(int));
      ASSERT_TRUE(r.comm->allgather(m.ptr, a.ptr, 3 * sizeof(int), *r.stream).ok());
      ASSERT_TRUE(r.comm->allgatherv(u.ptr, g.ptr, bytes, *r.stream).ok());
      a.out(all.data());
      g.out(gathered.data());
    }
    // reducescatter (average of floats): rank q receives block q
    const std::size_t block = 4;
    std::vector<float> rs_send(block * static_cast<std::size_t>(n)), rs_recv(block, -1);
    for (std::size_t i = 0; i < rs_send.size(); ++i) rs_send[i] = static_cast<float>(me + i);
    {
      Rank::Mem s(r, rs_send.data(), rs_send.size() * 4), o(r, nullptr, block * 4);
      ASSERT_TRUE(r.comm
                      ->reducescatter(s.ptr, o.ptr, block, DataType::kFloat32, ReduceOp::kAverage,
                                      *r.stream)
                      .ok());
      o.out(rs_recv.data());
    }
    // alltoallv: this rank sends q + 1 bytes of value (me * 16 + q) to rank q
    std::vector<std::size_t> sb, rb;
    std::vector<unsigned char> a2a_send, a2a_recv;
    for (int q = 0; q < n; ++q) {
      sb.push_back(static_cast<std::size_t>(q + 1));
      rb.push_back(static_cast<std::size_t>(me + 1));
      a2a_send.insert(a2a_send.end(), static_cast<std::size_t>(q + 1),
                      static_cast<unsigned char>(me * 16 + q));
    }
    a2a_recv.assign(static_cast<std::size_t>(n * (me + 1)), 0);
    {
      Rank::Mem s(r, a2a_send.data(), a2a_send.size()), o(r, nullptr, a2a_recv.size());
      ASSERT_TRUE(r.comm->alltoallv(s.ptr, sb, o.ptr, rb, *r.stream).ok());
      o.out(a2a_recv.data());
    }

    for (int q = 0; q < n; ++q) {
      for (int k = 0; k < 3; ++k) ASSERT_EQ(all[static_cast<std::size_t>(q * 3 + k)], q);
    }
    std::size_t at = 0;
    for (int q = 0; q < n; ++q) {
      for (int k = 0; k <= q; ++k) ASSERT_EQ(gathered[at++], 100 + q);
    }
    for (std::size_t i = 0; i < block; ++i) {
      double sum = 0;
      for (int q = 0; q < n; ++q)
        sum += static_cast<double>(q) + static_cast<double>(me) * block + i;
      ASSERT_FLOAT_EQ(rs_recv[i], static_cast<float>(sum / n)) << i;
    }
    for (int q = 0; q < n; ++q) {
      for (int k = 0; k <= me; ++k) {
        ASSERT_EQ(a2a_recv[static_cast<std::size_t>(q * (me + 1) + k)], q * 16 + me);
      }
    }
  });
}

TEST_P(CollectivesTest, AbortFailsEveryLaterCall) {
  run_ranks(GetParam(), [&](Rank& r) {
    EXPECT_TRUE(r.comm->async_error().ok());
    r.comm->abort();
    const Status st = r.comm->async_error();
    EXPECT_EQ(st.code(), ErrorCode::kPeerFailure);
    EXPECT_NE(st.message().find("aborted"), std::string::npos) << st.message();
    float x = 1;
    EXPECT_EQ(r.comm->allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum, *r.stream).message(),
              st.message());
    EXPECT_TRUE(r.finish().ok());  // nothing was enqueued
  });
}

TEST_P(CollectivesTest, BadArgumentsAreRefusedWhenCalled) {
  const int n = GetParam().ranks;
  run_ranks(GetParam(), [&](Rank& r) {
    Rank::Mem x(r, nullptr, 64);
    Status st = r.comm->broadcast(x.ptr, x.ptr, 4, n, *r.stream);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("root " + std::to_string(n)), std::string::npos) << st.message();
    st = r.comm->alltoallv(x.ptr, std::vector<std::size_t>(static_cast<std::size_t>(n + 1), 1),
                           x.ptr, std::vector<std::size_t>(static_cast<std::size_t>(n), 1),
                           *r.stream);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    st = r.comm->allgatherv(
        x.ptr, x.ptr, std::vector<std::size_t>(static_cast<std::size_t>(n + 1), 4), *r.stream);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(r.comm->async_error().ok());  // refused calls do not break it
  });
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const TestDevice& d : testing::test_devices()) {
    for (int n = 1; n <= d.max_ranks; ++n) {
      if (!d.even_ranks_only || n % 2 == 0) out.push_back({d, n});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Devices, CollectivesTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return info.param.device.kind + "_" + std::to_string(info.param.ranks) +
                                  "ranks";
                         });

}  // namespace
}  // namespace kolo::device
