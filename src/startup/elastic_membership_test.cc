// join_generation (startup/elastic_membership.h) over a memory store, with kolorun's side
// played by the test: plans written as the elastic driver writes them, members as threads.
#include "startup/elastic_membership.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "rendezvous/memory_store.h"

namespace kolo::core {
namespace {

namespace ek = rendezvous::elastic_keys;
using std::chrono::milliseconds;

std::vector<ek::Member> members(const std::vector<std::int64_t>& ids) {
  std::vector<ek::Member> out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    out.push_back({ids[i], "localhost", static_cast<int>(i), static_cast<int>(ids.size()), 0, 1});
  }
  return out;
}

// The driver's order: the plan, then the counter.
void write_plan(rendezvous::Store& store, std::int64_t g, const std::vector<std::int64_t>& ids) {
  ASSERT_TRUE(store.set(ek::plan_key(g), ek::format_plan(members(ids))).ok());
  std::int64_t count = 0;
  ASSERT_TRUE(store.add(ek::kGenerationsKey, 1, &count).ok());
  ASSERT_EQ(count, g + 1);
}

TEST(ElasticKeys, PlanRoundTripAndErrors) {
  std::vector<ek::Member> in = members({4, 7, 9});
  in[2].host = "b";
  in[2].cross_rank = 1;
  in[2].cross_size = 2;
  std::vector<ek::Member> out;
  ASSERT_TRUE(ek::parse_plan(ek::format_plan(in), &out).ok());
  EXPECT_EQ(out, in);
  EXPECT_EQ(ek::rank_of(out, 9), 2);
  EXPECT_EQ(ek::rank_of(out, 5), -1);
  ASSERT_TRUE(ek::parse_plan("", &out).ok());
  EXPECT_TRUE(out.empty());
  Status s = ek::parse_plan("1 a 0 1 0 1\n2 a 0\n", &out);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("line 2 '2 a 0'"), std::string::npos) << s.message();
  s = ek::parse_plan("1 a 0 2 0 1\n1 a 1 2 0 1\n", &out);
  EXPECT_NE(s.message().find("worker id 1 appears twice"), std::string::npos) << s.message();
  s = ek::parse_plan("1 a 2 2 0 1\n", &out);  // local_rank out of range
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
}

TEST(ElasticMembership, EveryMemberGetsItsRankInTheNewestPlan) {
  rendezvous::MemoryStore store;
  write_plan(store, 0, {0, 1, 2});
  write_plan(store, 1, {2, 0});  // worker 1 left; 2 is the oldest survivor now
  std::vector<ElasticMembership> got(2);
  std::vector<Status> status(2);
  std::thread a([&] { status[0] = join_generation(store, 0, 1, 10, &got[0]); });
  std::thread b([&] { status[1] = join_generation(store, 2, 1, 10, &got[1]); });
  a.join();
  b.join();
  ASSERT_TRUE(status[0].ok()) << status[0].message();
  ASSERT_TRUE(status[1].ok()) << status[1].message();
  EXPECT_EQ(got[0].generation, 1);
  EXPECT_EQ(got[0].rank, 1);
  EXPECT_EQ(got[1].rank, 0);
  EXPECT_EQ(got[0].size, 2);
  EXPECT_EQ(got[1].local_rank, 0);
  EXPECT_EQ(got[0].local_size, 2);
}

TEST(ElasticMembership, WaitsForAPlanThatComesLater) {
  rendezvous::MemoryStore store;
  write_plan(store, 0, {0});
  std::thread driver([&] {
    std::this_thread::sleep_for(milliseconds(300));
    write_plan(store, 1, {0});
  });
  ElasticMembership m;
  const auto t0 = Clock::now();
  const Status s = join_generation(store, 0, 1, 10, &m);
  driver.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(m.generation, 1);
  EXPECT_GE(Clock::now() - t0, milliseconds(250));
}

TEST(ElasticMembership, AWorkerOutOfThePlanIsRemoved) {
  rendezvous::MemoryStore store;
  write_plan(store, 0, {0, 1});
  write_plan(store, 1, {0});
  ElasticMembership m;
  ASSERT_TRUE(join_generation(store, 1, 1, 10, &m).ok());
  EXPECT_TRUE(m.removed);
  EXPECT_NE(m.why.find("generation 1 does not include this worker (id 1)"), std::string::npos)
      << m.why;
}

TEST(ElasticMembership, TheJobsEndRemovesAWaitingWorker) {
  rendezvous::MemoryStore store;
  write_plan(store, 0, {0, 1});
  std::thread driver([&] {
    std::this_thread::sleep_for(milliseconds(200));
    ASSERT_TRUE(store.set(ek::kFinishedKey, "rank 0 (host localhost) exited normally").ok());
  });
  ElasticMembership m;
  const Status s = join_generation(store, 1, 1, 10, &m);  // no generation 1 will come
  driver.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(m.removed);
  EXPECT_NE(m.why.find("ending (rank 0 (host localhost) exited normally)"), std::string::npos)
      << m.why;
}

TEST(ElasticMembership, ANewerPlanAbandonsABarrierThatCannotComplete) {
  rendezvous::MemoryStore store;
  write_plan(store, 0, {0, 1});  // worker 1 never arrives: it died
  std::thread driver([&] {
    std::this_thread::sleep_for(milliseconds(300));
    write_plan(store, 1, {0});
  });
  ElasticMembership m;
  const Status s = join_generation(store, 0, 0, 10, &m);
  driver.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(m.generation, 1);
  EXPECT_EQ(m.size, 1);
}

TEST(ElasticMembership, TimeoutsNameWhatNeverCame) {
  rendezvous::MemoryStore store;
  ElasticMembership m;
  Status s = join_generation(store, 0, 0, 0.3, &m);
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("no membership (generation 0) came from kolorun within 0.3 s "
                             "(KOLO_ELASTIC_TIMEOUT_SECONDS)"),
            std::string::npos)
      << s.message();
  write_plan(store, 0, {0, 5});
  s = join_generation(store, 0, 0, 0.3, &m);
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("generation 0 of the elastic job did not form within 0.3 s"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("rank 1 (worker id 5 on localhost) never arrived"), std::string::npos)
      << s.message();
}

TEST(ElasticMembership, NewerPlanExists) {
  rendezvous::MemoryStore store;
  bool newer = true;
  ASSERT_TRUE(newer_plan_exists(store, -1, &newer).ok());
  EXPECT_FALSE(newer);
  write_plan(store, 0, {0});
  ASSERT_TRUE(newer_plan_exists(store, -1, &newer).ok());
  EXPECT_TRUE(newer);
  ASSERT_TRUE(newer_plan_exists(store, 0, &newer).ok());
  EXPECT_FALSE(newer);
}

}  // namespace
}  // namespace kolo::core
