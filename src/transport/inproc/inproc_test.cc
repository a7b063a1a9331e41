// The inproc transport itself: control operations, deadlines and fault injection.
#include "transport/inproc/inproc.h"

#include <thread>

#include <gtest/gtest.h>

namespace kolo::transport {
namespace {

Deadline in(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void on_ranks(InprocWorld& world, const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r) {
    threads.emplace_back([&world, &fn, r] {
      auto comm = world.communicator(r);
      fn(r, *comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(InprocTest, ControlOperations) {
  InprocWorld world(3);
  on_ranks(world, [](int rank, Communicator& c) {
    std::vector<std::uint64_t> words = {~std::uint64_t{0}, std::uint64_t{1} << rank | 8};
    ASSERT_TRUE(c.control_and(words, in(5)).ok());
    EXPECT_EQ(words[0], ~std::uint64_t{0});
    EXPECT_EQ(words[1], 8u);
    std::vector<std::string> all;
    ASSERT_TRUE(c.control_gather("r" + std::to_string(rank), &all, in(5)).ok());
    if (rank == 0) {
      EXPECT_EQ(all, (std::vector<std::string>{"r0", "r1", "r2"}));
    }
    std::string msg = rank == 0 ? "from root" : "";
    ASSERT_TRUE(c.control_broadcast(&msg, in(5)).ok());
    EXPECT_EQ(msg, "from root");
  });
}

TEST(InprocTest, TopologyWithSimulatedHosts) {
  InprocWorld world(6, 2);
  EXPECT_EQ(world.topology_of(3).local_rank, 1);
  EXPECT_EQ(world.topology_of(3).cross_rank, 1);
  EXPECT_EQ(world.topology_of(5).cross_size, 3);
  EXPECT_EQ(world.topology_of(5).local_size, 2);
}

TEST(InprocTest, MissingRankIsNamedAtTheDeadlineAndTheWorldStaysBroken) {
  InprocWorld world(3);
  world.kill(1);
  on_ranks(world, [](int rank, Communicator& c) {
    const auto start = Clock::now();
    Status s = c.barrier(in(0.3));
    EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
    if (rank == 1) {
      EXPECT_NE(s.message().find("killed"), std::string::npos) << s.message();
      return;
    }
    EXPECT_NE(s.message().find("rank 1 did not take part"), std::string::npos) << s.message();
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
    float x = 1;
    EXPECT_EQ(c.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, in(5)).code(),
              ErrorCode::kPeerFailure);
  });
}

}  // namespace
}  // namespace kolo::transport
