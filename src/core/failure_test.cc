// Failures that must never hang: a dead rank and a stalled tensor.
#include <atomic>

#include <functional>

#include "core/ops.h"
#include "core/testing/ranks.h"

namespace kolo::core {
namespace {

using testing::run_ranks;
using testing::test_config;
using testing::view_of;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(FailureTest, DeadRankMakesOthersFailWithinThePeerTimeoutNamingIt) {
  Config c = test_config();
  c.peer_timeout_seconds = 1;
  transport::InprocWorld world(3);
  run_ranks(
      3, c,
      [&](int rank, Runtime& rt) {
        std::vector<float> v(4, 1.0f);
        AllreduceOptions o;
        o.name = "x";
        if (rank == 2) {
          world.kill(2);  // from now on rank 2 takes part in nothing, like a killed process
          return;
        }
        const auto start = Clock::now();
        Handle h = ops::allreduce(rt, {view_of(v, DataType::kFloat32)},
                                  {view_of(v, DataType::kFloat32)}, o, false);
        ASSERT_TRUE(h.wait_for(std::chrono::seconds(10)));
        EXPECT_EQ(h.error_code(), ErrorCode::kPeerFailure) << h.error_message();
        EXPECT_NE(h.error_message().find("rank 2"), std::string::npos) << h.error_message();
        EXPECT_LT(seconds_since(start), 5.0);
        // The runtime stays failed: new operations fail at once with the same error.
        try {
          ops::barrier(rt, {});
          ADD_FAILURE() << "operation accepted after peer failure";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kPeerFailure);
        }
      },
      0, &world);
}

// Two ranks allreduce "cached" twice (so that it is a cache hit: stalls must be found on
// the fast path too); then rank 1 submits nothing more until rank 0's `stalled` returns,
// which gets the runtime, a buffer and the cached name's options.
void with_rank_1_gone_quiet(
    const Config& c,
    const std::function<void(Runtime&, std::vector<float>&, const AllreduceOptions&)>& stalled) {
  std::atomic<bool> done{false};
  run_ranks(2, c, [&](int rank, Runtime& rt) {
    std::vector<float> v(4, 1.0f);
    AllreduceOptions o;
    o.name = "cached";
    for (int i = 0; i < 2; ++i) {
      ops::allreduce(rt, {view_of(v, DataType::kFloat32)}, {view_of(v, DataType::kFloat32)}, o,
                     false)
          .wait();
    }
    if (rank == 1) {
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    stalled(rt, v, o);
    done = true;
  });
}

TEST(FailureTest, StallInspectorWarnsThenShutsDownNamingTensorAndRanks) {
  Config c = test_config();
  c.stall_check_seconds = 1;
  c.stall_shutdown_seconds = 2;
  ::testing::internal::CaptureStderr();
  with_rank_1_gone_quiet(c, [](Runtime& rt, std::vector<float>& v, const AllreduceOptions& o) {
    const auto start = Clock::now();
    AllreduceOptions lonely;
    lonely.name = "lonely";
    Handle h1 = ops::allreduce(rt, {view_of(v, DataType::kFloat32)},
                               {view_of(v, DataType::kFloat32)}, lonely, false);
    Handle h2 = ops::allreduce(rt, {view_of(v, DataType::kFloat32)},
                               {view_of(v, DataType::kFloat32)}, o, false);
    EXPECT_FALSE(h1.wait_for(std::chrono::milliseconds(500)));  // stalled, not failed yet
    ASSERT_TRUE(h1.wait_for(std::chrono::seconds(15)));
    ASSERT_TRUE(h2.wait_for(std::chrono::seconds(15)));
    EXPECT_EQ(h1.error_code(), ErrorCode::kStalled) << h1.error_message();
    EXPECT_EQ(h2.error_code(), ErrorCode::kStalled) << h2.error_message();
    EXPECT_NE(h1.error_message().find("not by rank 1"), std::string::npos) << h1.error_message();
    EXPECT_LT(seconds_since(start), 10.0);
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("tensor 'lonely' was submitted by rank 0 but not by rank 1"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("tensor 'cached' was submitted by rank 0 but not by rank 1"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("[kolo 0 warning stall]"), std::string::npos) << err;
  // The warning says what to do about uneven data and what happens next.
  EXPECT_NE(err.find("should call kolo::join()"), std::string::npos) << err;
  EXPECT_NE(err.find("kolo stops the job after 2 s of stall"), std::string::npos) << err;
}

// KOLO_STALL_SHUTDOWN_SECONDS works with the stall check (warnings) off, also for a name
// that is a cache hit: the waiting rank fails within a bound instead of hanging.
TEST(FailureTest, StallShutdownWorksWithTheStallCheckOff) {
  Config c = test_config();
  c.stall_check_seconds = 0;
  c.stall_shutdown_seconds = 1;
  with_rank_1_gone_quiet(c, [](Runtime& rt, std::vector<float>& v, const AllreduceOptions& o) {
    const auto start = Clock::now();
    Handle h = ops::allreduce(rt, {view_of(v, DataType::kFloat32)},
                              {view_of(v, DataType::kFloat32)}, o, false);
    ASSERT_TRUE(h.wait_for(std::chrono::seconds(15))) << "stall shutdown never came";
    EXPECT_EQ(h.error_code(), ErrorCode::kStalled) << h.error_message();
    EXPECT_NE(h.error_message().find("'cached'"), std::string::npos) << h.error_message();
    EXPECT_LT(seconds_since(start), 10.0);
  });
}

}  // namespace
}  // namespace kolo::core
