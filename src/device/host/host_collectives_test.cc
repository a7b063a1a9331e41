// What only the host stand-in's collectives show (the checks every device shares are in
// collectives_test.cc): the unique id's exchange over a CPU control plane with several
// ranks, and a peer that never takes part, named within the device's timeout.
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

}  // namespace
}  // namespace kolo::device::host
