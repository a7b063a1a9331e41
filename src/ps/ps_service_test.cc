// PsService over a real RpcServer in this process, reached through PsClient: create,
// pull/push dense and rows, asynchronous and synchronous modes, learning rate, state,
// errors, push bytes.
#include "ps/ps_service.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "ps/update_rule.h"

namespace kolo::ps {
namespace {

struct Job {
  explicit Job(int num_ps = 2) {
    for (int t = 0; t < num_ps; ++t) {
      const std::string name = "/job:ps/replica:0/task:" + std::to_string(t);
      servers.push_back(std::make_unique<RpcServer>(
          RpcServerOptions{.endpoint = "tcp://127.0.0.1:0", .secret = "sec", .name = name}));
      services.push_back(std::make_unique<PsService>(*servers.back()));
      EXPECT_TRUE(servers.back()->start().ok());
      options.endpoints.push_back(servers.back()->endpoint());
      options.names.push_back(name);
    }
    options.secret = "sec";
    options.self = "/job:chief/replica:0/task:0";
    client = std::make_unique<PsClient>(options);
  }
  ~Job() {
    client.reset();
    for (auto& s : services) s->shutdown();
    for (auto& s : servers) s->stop();
  }
  PsClientOptions options;
  std::vector<std::unique_ptr<RpcServer>> servers;
  std::vector<std::unique_ptr<PsService>> services;
  std::unique_ptr<PsClient> client;
};

ShardInfo shard(const std::string& var, int index, int ps, std::vector<std::int64_t> shape,
                DataType dtype = DataType::kFloat32, std::int64_t row_begin = 0) {
  return {.variable = var,
          .shard = index,
          .ps_task = ps,
          .shape = shape,
          .dtype = dtype,
          .row_begin = row_begin};
}

const UpdateRule kSgd{.kind = UpdateRule::Kind::kSgd, .learning_rate = 0.5};

Status create(Job& job, const ShardInfo& s, const std::vector<float>& init, int replicas = 0,
              bool* existed = nullptr, UpdateRule rule = kSgd) {
  bool e = false;
  return job.client->create(s, init.data(), rule, replicas, existed ? existed : &e,
                            deadline_after(10));
}

std::vector<float> pull_whole(Job& job, const ShardInfo& s, std::int64_t* version = nullptr) {
  std::vector<float> out(s.bytes() / 4);
  std::vector<Pull> pulls{{.shard = &s, .out = out.data()}};
  EXPECT_TRUE(job.client->pull(pulls, deadline_after(10)).ok());
  if (version) *version = pulls[0].version;
  return out;
}

TEST(PsServiceTest, CreateNewExistingAndMismatched) {
  Job job;
  const ShardInfo w = shard("w", 0, 1, {2, 3});
  bool existed = true;
  ASSERT_TRUE(create(job, w, {1, 2, 3, 4, 5, 6}, 0, &existed).ok());
  EXPECT_FALSE(existed);
  // A restarted chief finds it, values kept.
  ASSERT_TRUE(create(job, w, {0, 0, 0, 0, 0, 0}, 0, &existed).ok());
  EXPECT_TRUE(existed);
  EXPECT_EQ(pull_whole(job, w), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const Status s = create(job, shard("w", 0, 1, {3, 2}), {0, 0, 0, 0, 0, 0});
  EXPECT_EQ(s.code(), ErrorCode::kMismatch);
  EXPECT_NE(s.message().find("variable 'w' shard 0 on ps task /job:ps/replica:0/task:1 exists as "
                             "[2, 3] float32 from row 0"),
            std::string::npos)
      << s.message();
  const Status s3 = create(job, shard("w", 0, 5, {2, 3}), {1, 2, 3, 4, 5, 6});
  EXPECT_NE(s3.message().find("ps task 5; the job has 2 ps tasks"), std::string::npos)
      << s3.message();
  const Status s4 = create(job, shard("i", 0, 0, {2}, DataType::kInt32), {1, 2});
  EXPECT_NE(s4.message().find("float32 or float64"), std::string::npos) << s4.message();
}

TEST(PsServiceTest, AsyncDensePushesApplyAtOnceAcrossPsTasks) {
  Job job;
  const ShardInfo a = shard("a", 0, 0, {2}), b = shard("b", 0, 1, {3});
  ASSERT_TRUE(create(job, a, {1, 1}).ok());
  ASSERT_TRUE(create(job, b, {2, 2, 2}).ok());
  const std::vector<float> ga{1, 2}, gb{2, 0, -2};
  std::vector<Push> pushes{{.shard = &a, .grad = ga.data()}, {.shard = &b, .grad = gb.data()}};
  ASSERT_TRUE(job.client->push(pushes, deadline_after(10)).ok());
  EXPECT_TRUE(pushes[0].accepted && pushes[1].accepted);
  std::int64_t version = 0;
  EXPECT_EQ(pull_whole(job, a, &version), (std::vector<float>{0.5f, 0.0f}));  // lr 0.5
  EXPECT_EQ(version, 1);
  EXPECT_EQ(pull_whole(job, b), (std::vector<float>{1, 2, 3}));
  // Async: an old version is still applied (TensorFlow's asynchronous training).
  pushes.resize(1);
  pushes[0].version = 0;
  ASSERT_TRUE(job.client->push(pushes, deadline_after(10)).ok());
  EXPECT_TRUE(pushes[0].accepted);
  EXPECT_EQ(pull_whole(job, a, &version), (std::vector<float>{0.0f, -1.0f}));
  EXPECT_EQ(version, 2);
}

TEST(PsServiceTest, RowsPullAndPushTouchOnlyThoseRows) {
  Job job(1);
  const ShardInfo e = shard("emb", 0, 0, {4, 2}, DataType::kFloat32, 100);
  ASSERT_TRUE(create(job, e, {0, 1, 2, 3, 4, 5, 6, 7}).ok());
  std::vector<float> rows_out(4);
  std::vector<Pull> pulls{{.shard = &e, .out = rows_out.data(), .rows = {3, 1}, .whole = false}};
  ASSERT_TRUE(job.client->pull(pulls, deadline_after(10)).ok());
  EXPECT_EQ(rows_out, (std::vector<float>{6, 7, 2, 3}));
  const std::vector<float> g{2, 2};
  std::vector<Push> pushes{{.shard = &e, .grad = g.data(), .rows = {2}, .whole = false}};
  ASSERT_TRUE(job.client->push(pushes, deadline_after(10)).ok());
  EXPECT_EQ(pull_whole(job, e), (std::vector<float>{0, 1, 2, 3, 3, 4, 6, 7}));
}

TEST(PsServiceTest, SparsePushesCarryOnlyTheirRowsBytes) {
  Job job(1);
  const std::int64_t rows = 10000, dim = 16;
  const ShardInfo e = shard("emb", 0, 0, {rows, dim});
  ASSERT_TRUE(create(job, e, std::vector<float>(rows * dim, 0.f)).ok());
  const std::uint64_t before = job.client->push_bytes_sent();
  const std::vector<float> g(3 * dim, 1.f);
  std::vector<Push> pushes{{.shard = &e, .grad = g.data(), .rows = {5, 77, 9999}, .whole = false}};
  ASSERT_TRUE(job.client->push(pushes, deadline_after(10)).ok());
  const std::uint64_t sent = job.client->push_bytes_sent() - before;
  EXPECT_GE(sent, 3 * dim * 4 + 3 * 8);
  EXPECT_LT(sent, 3 * dim * 4 + 3 * 8 + 400);  // plus a header of a few fields
  EXPECT_EQ(job.servers[0]->bytes_received("ps.push"), sent);
  std::vector<float> dense(rows * dim, 0.f);
  pushes = {{.shard = &e, .grad = dense.data()}};
  ASSERT_TRUE(job.client->push(pushes, deadline_after(10)).ok());
  EXPECT_GT(job.client->push_bytes_sent() - before - sent, rows * dim * 4);
}

TEST(PsServiceTest, SyncAggregatesKDropsStaleAndPullsWaitForTheVersion) {
  Job job(1);
  const ShardInfo w = shard("w", 0, 0, {2});
  ASSERT_TRUE(create(job, w, {0, 0}, /*replicas=*/2).ok());
  const std::vector<float> g1{1, 3}, g2{3, 5}, g3{100, 100};
  // A pull for version 1 waits until two pushes of version 0 are in.
  std::vector<float> out(2);
  Status waited;
  std::int64_t got_version = -1;
  std::thread puller([&] {
    std::vector<Pull> pulls{{.shard = &w, .out = out.data(), .min_version = 1}};
    waited = job.client->pull(pulls, deadline_after(20));
    got_version = pulls[0].version;
  });
  std::vector<Push> p1{{.shard = &w, .grad = g1.data(), .version = 0}};
  ASSERT_TRUE(job.client->push(p1, deadline_after(10)).ok());
  EXPECT_TRUE(p1[0].accepted);
  std::int64_t version = -1;
  EXPECT_EQ(pull_whole(job, w, &version), (std::vector<float>{0, 0}));  // one of two: not applied
  EXPECT_EQ(version, 0);
  std::vector<Push> p2{{.shard = &w, .grad = g2.data(), .version = 0}};
  ASSERT_TRUE(job.client->push(p2, deadline_after(10)).ok());
  EXPECT_TRUE(p2[0].accepted);
  puller.join();
  ASSERT_TRUE(waited.ok()) << waited.message();
  EXPECT_EQ(got_version, 1);
  EXPECT_EQ(out, (std::vector<float>{-1, -2}));  // mean (2, 4) x lr 0.5
  // A push pulled at version 0 is now stale: dropped, values unchanged.
  std::vector<Push> stale{{.shard = &w, .grad = g3.data(), .version = 0}};
  ASSERT_TRUE(job.client->push(stale, deadline_after(10)).ok());
  EXPECT_FALSE(stale[0].accepted);
  EXPECT_EQ(pull_whole(job, w), (std::vector<float>{-1, -2}));
  // A push from the future is an error.
  std::vector<Push> ahead{{.shard = &w, .grad = g3.data(), .version = 5}};
  const Status s = job.client->push(ahead, deadline_after(10));
  EXPECT_NE(s.message().find("says version 5, ahead of the shard's 1"), std::string::npos)
      << s.message();
  // A pull for a version nobody pushes fails by its deadline, saying why.
  std::vector<Pull> pulls{{.shard = &w, .out = out.data(), .min_version = 2}};
  const auto start = Clock::now();
  const Status t = job.client->pull(pulls, deadline_after(0.5));
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1500));
  EXPECT_EQ(t.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(t.message().find("variable 'w' shard 0 on ps task /job:ps/replica:0/task:0 is at "
                             "version 1; the pull waited for version 2"),
            std::string::npos)
      << t.message();
}

TEST(PsServiceTest, SyncRowPushesAggregateTheirRows) {
  Job job(1);
  const ShardInfo e = shard("emb", 0, 0, {3, 1});
  ASSERT_TRUE(create(job, e, {0, 0, 0}, 2).ok());
  const std::vector<float> g1{2}, g2{4, 6};
  std::vector<Push> a{{.shard = &e, .grad = g1.data(), .rows = {0}, .whole = false}};
  std::vector<Push> b{{.shard = &e, .grad = g2.data(), .rows = {0, 2}, .whole = false}};
  ASSERT_TRUE(job.client->push(a, deadline_after(10)).ok());
  ASSERT_TRUE(job.client->push(b, deadline_after(10)).ok());
  // Sum / K: row 0 (2 + 4) / 2 = 3, row 2 6 / 2 = 3; x lr 0.5.
  EXPECT_EQ(pull_whole(job, e), (std::vector<float>{-1.5f, 0, -1.5f}));
}

TEST(PsServiceTest, SetLearningRateReachesEveryShard) {
  Job job;
  const ShardInfo a = shard("a", 0, 0, {1}), b = shard("b", 0, 1, {1});
  ASSERT_TRUE(create(job, a, {0}).ok());
  ASSERT_TRUE(create(job, b, {0}).ok());
  ASSERT_TRUE(job.client->set_learning_rate(2.0, deadline_after(10)).ok());
  const std::vector<float> g{1};
  std::vector<Push> pushes{{.shard = &a, .grad = g.data()}, {.shard = &b, .grad = g.data()}};
  ASSERT_TRUE(job.client->push(pushes, deadline_after(10)).ok());
  EXPECT_EQ(pull_whole(job, a), std::vector<float>{-2});
  EXPECT_EQ(pull_whole(job, b), std::vector<float>{-2});
  EXPECT_NE(
      job.client->set_learning_rate(-1, deadline_after(10)).message().find("learning rate -1"),
      std::string::npos);
}

TEST(PsServiceTest, ReadAndAssignStateRestoresValuesSlotsStepAndVersion) {
  Job job(1);
  const UpdateRule adam{.kind = UpdateRule::Kind::kAdam, .learning_rate = 0.1};
  const ShardInfo w = shard("w", 0, 0, {3});
  ASSERT_TRUE(create(job, w, {1, 2, 3}, 0, nullptr, adam).ok());
  const std::vector<float> g{1, -1, 0.5};
  std::vector<Push> pushes{{.shard = &w, .grad = g.data()}};
  ASSERT_TRUE(job.client->push(pushes, deadline_after(10)).ok());
  ShardState saved;
  ASSERT_TRUE(job.client->read_state(w, &saved, deadline_after(10)).ok());
  EXPECT_EQ(saved.step, 1);
  EXPECT_EQ(saved.version, 1);
  ASSERT_EQ(saved.slots.size(), 3u);
  EXPECT_EQ(saved.slots[0].first, "exp_avg");
  const std::vector<float> after_one = pull_whole(job, w);
  ASSERT_TRUE(job.client->push(pushes, deadline_after(10)).ok());
  const std::vector<float> after_two = pull_whole(job, w);
  // Restore the checkpoint on a fresh ps task: the next push gives the same values.
  Job fresh(1);
  ASSERT_TRUE(create(fresh, w, {0, 0, 0}, 0, nullptr, adam).ok());
  ASSERT_TRUE(fresh.client->assign_state(w, saved, deadline_after(10)).ok());
  std::int64_t version = 0;
  EXPECT_EQ(pull_whole(fresh, w, &version), after_one);
  EXPECT_EQ(version, 1);
  ASSERT_TRUE(fresh.client->push(pushes, deadline_after(10)).ok());
  EXPECT_EQ(pull_whole(fresh, w), after_two);
  ShardState bad = saved;
  bad.slots[1].first = "velocity";
  const Status s = fresh.client->assign_state(w, bad, deadline_after(10));
  EXPECT_NE(s.message().find("slot 'velocity' its update rule does not keep"), std::string::npos)
      << s.message();
  bad = saved;
  bad.values.resize(4);
  EXPECT_NE(
      fresh.client->assign_state(w, bad, deadline_after(10)).message().find("are 4 bytes, not 12"),
      std::string::npos);
}

TEST(PsServiceTest, BadRequestsNameWhatIsWrong) {
  Job job(1);
  const ShardInfo w = shard("w", 0, 0, {4, 2});
  ASSERT_TRUE(create(job, w, std::vector<float>(8, 1)).ok());
  const std::vector<float> g(8, 1);
  auto push_err = [&](Push p) {
    std::vector<Push> v{p};
    return job.client->push(v, deadline_after(10)).message();
  };
  const ShardInfo missing = shard("nope", 3, 0, {4, 2});
  EXPECT_NE(push_err({.shard = &missing, .grad = g.data()})
                .find("no variable 'nope' shard 3 on ps task /job:ps/replica:0/task:0"),
            std::string::npos);
  const ShardInfo wrong_shape = shard("w", 0, 0, {3, 2});
  EXPECT_NE(push_err({.shard = &wrong_shape, .grad = g.data()})
                .find("gradient for variable 'w' shard 0 on ps task /job:ps/replica:0/task:0 is 24 "
                      "bytes; its shape [4, 2] of float32 take 32"),
            std::string::npos)
      << push_err({.shard = &wrong_shape, .grad = g.data()});
  EXPECT_NE(push_err({.shard = &w, .grad = g.data(), .rows = {1, 4}, .whole = false})
                .find("row 4 is out of range for variable 'w' shard 0"),
            std::string::npos);
  EXPECT_NE(push_err({.shard = &w, .grad = g.data(), .rows = {1, 1}, .whole = false})
                .find("row 1 appears twice"),
            std::string::npos);
  EXPECT_NE(push_err({.shard = &w, .grad = g.data(), .version = -3}).find("version -3"),
            std::string::npos);
  // Nothing of those was applied.
  EXPECT_EQ(pull_whole(job, w), std::vector<float>(8, 1));
  // A batch with one bad item applies none of it.
  const ShardInfo v = shard("v", 0, 0, {1});
  ASSERT_TRUE(create(job, v, {0}).ok());
  const std::vector<float> one{1};
  std::vector<Push> batch{{.shard = &v, .grad = one.data()}, {.shard = &missing, .grad = g.data()}};
  EXPECT_FALSE(job.client->push(batch, deadline_after(10)).ok());
  EXPECT_EQ(pull_whole(job, v), std::vector<float>{0});
  EXPECT_TRUE(job.client->ping(0, deadline_after(10)).ok());
}

TEST(PsServiceTest, ShutdownWakesWaitingPulls) {
  Job job(1);
  const ShardInfo w = shard("w", 0, 0, {1});
  ASSERT_TRUE(create(job, w, {0}, 2).ok());
  std::vector<float> out(1);
  Status s;
  std::thread puller([&] {
    std::vector<Pull> pulls{{.shard = &w, .out = out.data(), .min_version = 1}};
    s = job.client->pull(pulls, deadline_after(30));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = Clock::now();
  job.services[0]->shutdown();
  puller.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(s.message().find("shutting down"), std::string::npos) << s.message();
}

TEST(PsServiceTest, DeadPsTaskIsNamed) {
  Job job(2);
  const ShardInfo w = shard("w", 0, 1, {1});
  ASSERT_TRUE(create(job, w, {0}).ok());
  job.servers[1]->stop();
  std::vector<float> out(1);
  std::vector<Pull> pulls{{.shard = &w, .out = out.data()}};
  const Status s = job.client->pull(pulls, deadline_after(0.5));
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("the task /job:ps/replica:0/task:1 at"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace kolo::ps
