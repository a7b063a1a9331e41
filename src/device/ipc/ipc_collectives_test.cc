// connect_collectives' choice of path and the CUDA-IPC path's failures, with host
// stand-ins as ranks (threads of this test) over an in-process control plane. The
// collectives' results are checked by collectives_test.cc (the host_ipc kind) and across
// processes by tests/device/ipc_check.cc.
#include "device/ipc/ipc_collectives.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "device/host/host_device.h"

namespace kolo::device {
namespace {

using std::chrono::duration;

struct Rank {
  std::unique_ptr<Device> dev;
  std::unique_ptr<transport::Communicator> control;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Collectives> comm;
  Status connected;
};

// n ranks as threads: each makes a stand-in (playing GPU `shared[r]`, empty: its own, with
// no network for NCCL's way; on host `hosts[r]`, empty: this one), connects with
// `options[r]`, then runs fn.
void run(int n, const std::vector<std::string>& shared, const std::vector<ConnectOptions>& options,
         const std::function<void(int, Rank&)>& fn, const std::vector<std::string>& hosts = {}) {
  transport::InprocWorld world(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Rank rank;
      const auto i = static_cast<std::size_t>(r);
      rank.dev = host::make_host_device({.index = r,
                                         .timeout_seconds = 20,
                                         .shared_id = shared[i],
                                         .host = hosts.empty() ? std::string() : hosts[i]});
      rank.control = world.communicator(r);
      ASSERT_TRUE(rank.dev->create_stream(&rank.stream).ok());
      rank.connected =
          connect_collectives(*rank.dev, *rank.control, deadline_after(20), &rank.comm, options[i]);
      fn(r, rank);
    });
  }
  for (auto& t : threads) t.join();
}

// One float's allreduce, waited for; also after a failure, as work enqueued before it may
// still read `x`.
Status allreduce_one(Rank& r, float* x) {
  const Status s = r.comm->allreduce(x, x, 1, DataType::kFloat32, ReduceOp::kSum, *r.stream);
  std::unique_ptr<Event> done;
  KOLO_RETURN_IF_ERROR(r.dev->create_event(&done));
  KOLO_RETURN_IF_ERROR(r.dev->record(*done, *r.stream));
  const Status waited = r.dev->synchronize(*done, deadline_after(20));
  return s.ok() ? waited : s;
}

// Devices of their own take NCCL's way (here: the stand-in's create_collectives, which
// has no network in this test and says so); devices shared on one host take the IPC path,
// which needs none.
TEST(ConnectCollectives, SharedDevicesTakeTheIpcPathAndOthersNcclsWay) {
  run(2, {"", ""}, {{}, {}}, [](int, Rank& r) {
    EXPECT_EQ(r.connected.code(), ErrorCode::kUnsupported) << r.connected.message();
    EXPECT_NE(r.connected.message().find("no network"), std::string::npos) << r.connected.message();
  });
  run(3, {"gpu", "gpu", "gpu"}, {{}, {}, {}}, [](int, Rank& r) {
    ASSERT_TRUE(r.connected.ok()) << r.connected.message();
    float x = 2;
    ASSERT_TRUE(allreduce_one(r, &x).ok());
    EXPECT_EQ(x, 6);
  });
}

// Host-mates that share a GPU on several hosts take the hierarchical collectives, which
// need as many ranks on every host: otherwise every rank gets the same error naming the
// hosts' rank counts.
TEST(ConnectCollectives, HostsWithDifferentRankCountsCannotShareGpusHierarchically) {
  run(3, {"gpu a", "gpu a", "gpu b"}, std::vector<ConnectOptions>(3),
      [](int, Rank& r) {
        EXPECT_EQ(r.connected.code(), ErrorCode::kInvalidArgument);
        const std::string& m = r.connected.message();
        EXPECT_NE(m.find("need as many ranks on every host"), std::string::npos) << m;
        EXPECT_NE(m.find("the host of rank 0 has 2 and the host of rank 2 has 1"),
                  std::string::npos)
            << m;
      },
      {"a", "a", "b"});
}

// abort() on one rank (from another thread, as the runtime's watchdog would) fails that
// rank's calls at once and reaches the peers' barriers: they fail quoting it, long before
// the peer timeout.
TEST(IpcCollectives, AnAbortReachesThePeersAtOnce) {
  const std::vector<ConnectOptions> o(3, {.ipc_timeout_seconds = 20});
  run(3, {"gpu", "gpu", "gpu"}, o, [](int rank, Rank& r) {
    ASSERT_TRUE(r.connected.ok()) << r.connected.message();
    float x = 1;
    ASSERT_TRUE(allreduce_one(r, &x).ok());
    if (rank == 0) std::thread([&] { r.comm->abort(); }).join();
    const auto start = Clock::now();
    const Status s = allreduce_one(r, &x);
    const double took = duration<double>(Clock::now() - start).count();
    EXPECT_EQ(s.code(), ErrorCode::kPeerFailure) << s.message();
    EXPECT_NE(s.message().find("was aborted"), std::string::npos) << s.message();
    EXPECT_LT(took, 5.0);
    EXPECT_FALSE(r.comm->async_error().ok());
  });
}

// A peer that never makes the call is named when the peer timeout has passed.
TEST(IpcCollectives, APeerThatNeverCallsIsNamedAtThePeerTimeout) {
  const std::vector<ConnectOptions> o(2, {.ipc_timeout_seconds = 0.5});
  run(2, {"gpu", "gpu"}, o, [](int rank, Rank& r) {
    ASSERT_TRUE(r.connected.ok()) << r.connected.message();
    if (rank == 1) {  // hung: neither calls nor closes until rank 0 gave up
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    float x = 1;
    const auto start = Clock::now();
    const Status s = allreduce_one(r, &x);
    const double took = duration<double>(Clock::now() - start).count();
    EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
    EXPECT_GT(took, 0.3);
    EXPECT_LT(took, 5.0);
  });
}

// A rank that closes its collectives while the others run one does not pass for a
// participant: they fail at once naming it (the barrier alone counts arrivals only).
TEST(IpcCollectives, ARankThatClosesWhileOthersRunIsNamed) {
  run(3, {"gpu", "gpu", "gpu"}, std::vector<ConnectOptions>(3), [](int rank, Rank& r) {
    ASSERT_TRUE(r.connected.ok()) << r.connected.message();
    if (rank == 2) return;  // closes
    float x = 1;
    const Status s = allreduce_one(r, &x);
    EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
    EXPECT_NE(s.message().find("rank 2 closed its collectives while this rank ran allreduce"),
              std::string::npos)
        << s.message();
  });
}

// Regions smaller than 8 bytes per rank cannot hold a reducescatter's blocks: refused.
TEST(IpcCollectives, RegionsTooSmallForTheRanksAreRefused) {
  const std::vector<ConnectOptions> o(3, {.ipc_half_bytes = 16});
  run(3, {"gpu", "gpu", "gpu"}, o, [](int, Rank& r) {
    EXPECT_EQ(r.connected.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.connected.message().find("less than 8 per rank"), std::string::npos)
        << r.connected.message();
  });
}

}  // namespace
}  // namespace kolo::device
