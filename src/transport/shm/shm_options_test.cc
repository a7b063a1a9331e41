// The shm transport obeys the options it is handed (from the core's option registry,
// through the TransportContext), never the process environment: KOLO_SHM and
// KOLO_FUSION_THRESHOLD set in the environment but not in the options change nothing.
//
// Not for: the collectives (shm_allreduce_test.cc) or the selection policy's cases (shm_test.cc).
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/testing/scoped_env.h"
#include "transport/inproc/inproc.h"
#include "transport/shm/shm_communicator.h"

namespace kolo::transport {
namespace {

using kolo::testing::ScopedEnv;

// maybe_wrap_in_shm on two ranks (threads over one inproc world, one simulated host);
// returns the communicator's name and region size of rank 0 (0: no fusion buffer).
void select(const ShmOptions& options, std::string* name, std::size_t* region) {
  InprocWorld world(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = world.communicator(r);
      const Status s = maybe_wrap_in_shm(comm, options);
      EXPECT_TRUE(s.ok()) << s.to_string();
      if (r != 0) return;
      *name = comm->name();
      *region = 0;
      for (std::size_t bytes = std::size_t{64} << 20; bytes >= 4096; bytes /= 2) {
        if (comm->fusion_buffer(bytes) != nullptr) {
          *region = bytes;
          break;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(ShmOptionsFromContextTest, RegionSizeAndModeComeFromTheOptionsNotTheEnvironment) {
  const ScopedEnv shm("KOLO_SHM", "0");
  const ScopedEnv threshold("KOLO_FUSION_THRESHOLD", "67108864");
  std::string name;
  std::size_t region = 0;
  select(shm_options("auto", std::int64_t{1} << 20), &name, &region);
  EXPECT_EQ(name, "shm");
  EXPECT_EQ(region, std::size_t{1} << 20);
}

TEST(ShmOptionsFromContextTest, ModeZeroInTheOptionsWinsOverTheEnvironment) {
  const ScopedEnv shm("KOLO_SHM", "1");
  std::string name;
  std::size_t region = 0;
  select(shm_options("0", std::int64_t{1} << 20), &name, &region);
  EXPECT_EQ(name, "inproc");
}

TEST(ShmOptionsFromContextTest, RegionSizeFollowsTheFusionThreshold) {
  EXPECT_EQ(shm_options("auto", std::int64_t{64} << 20).region_bytes, std::size_t{64} << 20);
  EXPECT_EQ(shm_options("1", 0).region_bytes, std::size_t{4} << 20);
  EXPECT_EQ(shm_options("0", 1000).mode, "0");
}

}  // namespace
}  // namespace kolo::transport
