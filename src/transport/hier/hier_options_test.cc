// The hierarchical transport's policy obeys the options it is handed (from the core's
// option registry, through the TransportContext), never the process environment:
// KOLO_HIERARCHICAL and KOLO_SHM set in the environment but not in the options change
// nothing. Ranks are threads over an inproc world with simulated hosts; every case
// decides before the MPI-only setup (wrap_in_hierarchical), so no MPI job is needed.
//
// Not for: the transport itself across processes (kolo_hier_check, tests/transport/hier_check.cc).
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/testing/scoped_env.h"
#include "transport/hier/hier_communicator.h"
#include "transport/inproc/inproc.h"

namespace kolo::transport {
namespace {

using kolo::testing::ScopedEnv;

HierOptions options(const char* mode, const char* shm_mode) {
  HierOptions o;
  o.mode = mode;
  o.shm.mode = shm_mode;
  return o;
}

// maybe_wrap_in_hierarchical on every rank of `world`; `check` sees rank r's result.
void decide(InprocWorld& world, const HierOptions& o,
            const std::function<void(const Status&, bool wrapped, Communicator&)>& check) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = world.communicator(r);
      bool wrapped = true;
      const Status s = maybe_wrap_in_hierarchical(comm, o, &wrapped);
      check(s, wrapped, *comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(HierOptionsFromContextTest, ModeZeroInTheOptionsWinsOverTheEnvironment) {
  const ScopedEnv hier("KOLO_HIERARCHICAL", "1");
  InprocWorld world(4, 2);  // two hosts of two ranks
  decide(world, options("0", "auto"), [](const Status& s, bool wrapped, Communicator& comm) {
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_FALSE(wrapped);
    EXPECT_STREQ(comm.name(), "inproc");
  });
}

TEST(HierOptionsFromContextTest, AutoOnOneHostIsNoErrorWhateverTheEnvironmentSays) {
  const ScopedEnv hier("KOLO_HIERARCHICAL", "1");
  InprocWorld world(2);
  decide(world, options("auto", "auto"), [](const Status& s, bool wrapped, Communicator&) {
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_FALSE(wrapped);
  });
}

TEST(HierOptionsFromContextTest, ShmOffInTheOptionsConflictsWithRequiredHierarchy) {
  const ScopedEnv hier("KOLO_HIERARCHICAL", "0");
  const ScopedEnv shm("KOLO_SHM", "1");
  InprocWorld world(4, 2);
  decide(world, options("1", "0"), [](const Status& s, bool wrapped, Communicator&) {
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.message().find("KOLO_HIERARCHICAL=1 and KOLO_SHM=0 conflict"), std::string::npos)
        << s.message();
    EXPECT_FALSE(wrapped);
  });
  // And auto with shm off in the options keeps the base, though the environment says 1.
  decide(world, options("auto", "0"), [](const Status& s, bool wrapped, Communicator& comm) {
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_FALSE(wrapped);
    EXPECT_STREQ(comm.name(), "inproc");
  });
}

}  // namespace
}  // namespace kolo::transport
