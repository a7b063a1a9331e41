// The host stand-in's collectives (device.h's Collectives over host/), 2-4 ranks as
// threads: every collective and dtype against a reference computed here in double, the
// unique id's exchange, a peer that never takes part, abort, bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "common/reduce.h"
#include "device/host/host_device.h"

namespace kolo::device::host {
namespace {

// One rank's device, stream and event.
struct Rank {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Event> done;
  std::unique_ptr<Collectives> comm;
  // Records the stream's work so far and waits for it.
  Status finish(double seconds = 20) {
    KOLO_RETURN_IF_ERROR(dev->record(*done, *stream));
    return dev->synchronize(*done, deadline_after(seconds));
  }
};

// Runs fn(rank) on `n` threads, each with its own stand-in device connected through one
// fabric with one unique id (made by rank 0, as connect_collectives does).
void run_ranks(int n, const std::function<void(Rank&)>& fn, double timeout = 20,
               InprocFabric* fabric_out = nullptr, UniqueId* id_out = nullptr) {
  InprocFabric local;
  InprocFabric& fabric = fabric_out ? *fabric_out : local;
  UniqueId id;
  {
    auto maker = make_host_device({});
    ASSERT_TRUE(maker->create_unique_id(&id).ok());
  }
  if (id_out) *id_out = id;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Rank rank;
      rank.dev =
          make_host_device({.index = r, .timeout_seconds = timeout, .connect = fabric.connector()});
      ASSERT_TRUE(rank.dev->create_stream(&rank.stream).ok());
      ASSERT_TRUE(rank.dev->create_event(&rank.done).ok());
      ASSERT_TRUE(rank.dev->create_collectives(id, r, n, deadline_after(10), &rank.comm).ok());
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

class Ranks : public ::testing::TestWithParam<int> {};

TEST_P(Ranks, AllreduceOfEveryOpAndDtypeMatchesTheReference) {
  const int n = GetParam();
  const std::size_t count = 37;
  run_ranks(n, [&](Rank& r) {
    const int me = r.comm->rank();
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        if (t == DataType::kBool && op == ReduceOp::kAverage) continue;  // refused upstream
        const std::size_t bytes = count * dtype_size(t);
        std::vector<unsigned char> send(bytes), recv(bytes);
        for (std::size_t i = 0; i < count; ++i) store(send.data(), t, i, value(me, i, op));
        // Out of place, then in place (send == recv).
        ASSERT_TRUE(r.comm->allreduce(send.data(), recv.data(), count, t, op, *r.stream).ok());
        ASSERT_TRUE(r.comm->allreduce(send.data(), send.data(), count, t, op, *r.stream).ok());
        ASSERT_TRUE(r.finish().ok());
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
          ASSERT_NEAR(load(send.data(), t, i), want, eps * std::abs(want)) << "in place";
        }
      }
    }
  });
}

TEST_P(Ranks, BroadcastAllgatherReducescatterAndAlltoallvMoveTheRightBytes) {
  const int n = GetParam();
  run_ranks(n, [&](Rank& r) {
    const int me = r.comm->rank();
    // broadcast from every root, out of place
    for (int root = 0; root < n; ++root) {
      std::vector<int> send(5, me * 10 + 1), recv(5, -1);
      ASSERT_TRUE(
          r.comm->broadcast(send.data(), recv.data(), 5 * sizeof(int), root, *r.stream).ok());
      ASSERT_TRUE(r.finish().ok());
      for (int v : recv) ASSERT_EQ(v, root * 10 + 1);
    }
    // allgather and an uneven allgatherv: rank q gives q + 1 ints
    std::vector<int> mine(3, me), all(3 * static_cast<std::size_t>(n), -1);
    ASSERT_TRUE(r.comm->allgather(mine.data(), all.data(), 3 * sizeof(int), *r.stream).ok());
    std::vector<std::size_t> bytes;
    std::size_t total = 0;
    for (int q = 0; q < n; ++q) {
      bytes.push_back(static_cast<std::size_t>(q + 1) * sizeof(int));
      total += static_cast<std::size_t>(q + 1);
    }
    std::vector<int> uneven(static_cast<std::size_t>(me + 1), 100 + me), gathered(total, -1);
    ASSERT_TRUE(r.comm->allgatherv(uneven.data(), gathered.data(), bytes, *r.stream).ok());
    // reducescatter (average of floats): rank q receives block q
    const std::size_t block = 4;
    std::vector<float> rs_send(block * static_cast<std::size_t>(n)), rs_recv(block, -1);
    for (std::size_t i = 0; i < rs_send.size(); ++i) rs_send[i] = static_cast<float>(me + i);
    ASSERT_TRUE(r.comm
                    ->reducescatter(rs_send.data(), rs_recv.data(), block, DataType::kFloat32,
                                    ReduceOp::kAverage, *r.stream)
                    .ok());
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
    ASSERT_TRUE(r.comm->alltoallv(a2a_send.data(), sb, a2a_recv.data(), rb, *r.stream).ok());
    ASSERT_TRUE(r.finish().ok());

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

INSTANTIATE_TEST_SUITE_P(HostCollectives, Ranks, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// connect_collectives: rank 0's id reaches every rank over the control plane, and the
// communicator it makes works.
TEST(HostCollectives, ConnectMakesOneCommunicatorFromRankZerosId) {
  const int n = 3;
  transport::InprocWorld control(n);
  InprocFabric fabric;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto ctl = control.communicator(r);
      auto dev = make_host_device({.index = r, .connect = fabric.connector()});
      std::unique_ptr<Stream> s;
      std::unique_ptr<Event> e;
      ASSERT_TRUE(dev->create_stream(&s).ok());
      ASSERT_TRUE(dev->create_event(&e).ok());
      std::unique_ptr<Collectives> comm;
      ASSERT_TRUE(connect_collectives(*dev, *ctl, deadline_after(10), &comm).ok());
      EXPECT_EQ(comm->rank(), r);
      EXPECT_EQ(comm->size(), n);
      double x = r + 1.0;
      ASSERT_TRUE(comm->allreduce(&x, &x, 1, DataType::kFloat64, ReduceOp::kSum, *s).ok());
      ASSERT_TRUE(dev->record(*e, *s).ok());
      ASSERT_TRUE(dev->synchronize(*e, deadline_after(10)).ok());
      EXPECT_EQ(x, 6.0);
    });
  }
  for (auto& t : threads) t.join();
}

// A rank that never takes part: the others' collective fails within the device's timeout
// naming it, as an async error and as the stream's error; later calls fail at once.
TEST(HostCollectives, APeerThatNeverTakesPartIsNamedAndBreaksTheCommunicator) {
  InprocFabric fabric;
  UniqueId id;
  run_ranks(
      3,
      [&](Rank& r) {
        if (r.comm->rank() == 2) {
          fabric.world(id)->kill(2);  // dies before its call
          return;
        }
        float x = 1;
        ASSERT_TRUE(
            r.comm->allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum, *r.stream).ok());
        const auto start = Clock::now();
        const Status st = r.finish();
        EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
        EXPECT_EQ(st.code(), ErrorCode::kPeerFailure);
        EXPECT_NE(st.message().find("2"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find("host stand-in"), std::string::npos) << st.message();
        EXPECT_EQ(r.comm->async_error().message(), st.message());
        const Status later =
            r.comm->allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum, *r.stream);
        EXPECT_EQ(later.message(), st.message());
      },
      /*timeout=*/0.5, &fabric, &id);
}

TEST(HostCollectives, AbortFailsEveryLaterCall) {
  run_ranks(2, [&](Rank& r) {
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

TEST(HostCollectives, BadArgumentsAreRefusedWhenCalled) {
  run_ranks(2, [&](Rank& r) {
    int x = 0;
    Status st = r.comm->broadcast(&x, &x, sizeof x, 2, *r.stream);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("root 2"), std::string::npos) << st.message();
    st = r.comm->alltoallv(&x, {1}, &x, {1, 1}, *r.stream);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    st = r.comm->allgatherv(&x, &x, {4, 4, 4}, *r.stream);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(r.comm->async_error().ok());  // refused calls do not break it
  });
}

}  // namespace
}  // namespace kolo::device::host
