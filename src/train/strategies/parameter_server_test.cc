// ParameterServerStrategy's checks and helpers that need no running job: TensorFlow's
// cluster rules and messages, the resolver, the optimizer refusal, step tensors as bytes.
// The strategy at work (real processes): tests/ps.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "kolo/error.h"
#include "kolo/train.h"
#include "train/strategies/ps_batches.h"
#include "train/strategies/ps_impl.h"

namespace kolo::train {
namespace {

// Nothing listens at these addresses; the tests below never reach them.
ClusterSpec cluster(int workers, int ps, int chiefs = 1) {
  ClusterSpec c;
  int port = 9;
  for (int i = 0; i < chiefs; ++i) c.chief.push_back("127.0.0.1:" + std::to_string(port++));
  for (int i = 0; i < workers; ++i) c.worker.push_back("127.0.0.1:" + std::to_string(port++));
  for (int i = 0; i < ps; ++i) c.ps.push_back("127.0.0.1:" + std::to_string(port++));
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParameterServerStrategyTest, TensorFlowsClusterRulesAndMessages) {
  EXPECT_NE(error_of([] {
              ParameterServerStrategy s(ClusterResolver(cluster(2, 0), "worker", 0));
            }).find("There must be at least one ps."),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ParameterServerStrategy s(ClusterResolver(cluster(0, 1), "ps", 0));
            }).find("There must be at least one worker."),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ParameterServerStrategy s(ClusterResolver(cluster(1, 1, 0), "worker", 0));
            }).find("the cluster has no chief"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ClusterResolver r(cluster(1, 1), "boss", 0);
            }).find("unknown task type 'boss'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ClusterResolver r(cluster(2, 1), "worker", 2);
            }).find("task index 2 is out of range for 2 'worker' tasks"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ParameterServerStrategy s(ClusterResolver(cluster(1, 1), "worker", 0),
                                        VariablePartitioner::fixed_shards(0));
            }).find("FixedShardsPartitioner(num_shards=0)"),
            std::string::npos);
}

TEST(ParameterServerStrategyTest, FromTfConfigReadsTheTaskOrSaysWhatIsMissing) {
  ::unsetenv("TF_CONFIG");
  EXPECT_NE(error_of([] { ClusterResolver::from_tf_config(); }).find("TF_CONFIG is not set"),
            std::string::npos);
  ::setenv(
      "TF_CONFIG",
      R"({"cluster":{"chief":["h:1"],"worker":["h:2","h:3"],"ps":["h:4"]},"task":{"type":"worker","index":1}})",
      1);
  const ClusterResolver r = ClusterResolver::from_tf_config();
  EXPECT_EQ(r.task_type(), "worker");
  EXPECT_EQ(r.task_id(), 1);
  EXPECT_EQ(r.cluster_spec().worker.size(), 2u);
  EXPECT_EQ(r.cluster_spec().ps, std::vector<std::string>{"h:4"});
  ::setenv("TF_CONFIG", R"({"cluster":{"worker":["h:2"]},"task":{"type":"worker","index":3}})", 1);
  EXPECT_NE(error_of([] { ClusterResolver::from_tf_config(); }).find("TF_CONFIG: "),
            std::string::npos);
  ::unsetenv("TF_CONFIG");
}

TEST(ParameterServerStrategyTest, TheTaskAndReplicaCounts) {
  ParameterServerStrategy s(ClusterResolver(cluster(3, 2), "worker", 1));
  EXPECT_EQ(s.name(), "parameter_server");
  EXPECT_EQ(s.task_type(), "worker");
  EXPECT_EQ(s.task_index(), 1);
  EXPECT_EQ(s.num_ps(), 2);
  EXPECT_EQ(s.num_worker_tasks(), 3);
  EXPECT_EQ(s.num_replicas_in_sync(), 1);  // TensorFlow's: replicas in one step
  EXPECT_FALSE(s.is_chief());
}

TEST(ParameterServerStrategyTest, ACustomOptimizerCannotRunOnPsTasks) {
  ParameterServerStrategy s(ClusterResolver(cluster(1, 1), "worker", 0));
  torch::nn::Linear net(2, 2);
  CustomOptimizer custom{"MyOpt", [](std::vector<torch::Tensor> p) {
                           return std::make_unique<torch::optim::SGD>(p, 0.1);
                         }};
  EXPECT_NE(error_of([&] {
              s.create_variables(*net, custom);
            }).find("the optimizer 'MyOpt' is a CustomOptimizer, which cannot run on the ps tasks"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.pull(*net); }).find("call create_variables first"), std::string::npos);
}

TEST(ParameterServerStrategyTest, IntegerParametersAreRefusedByName) {
  ParameterServerStrategy s(ClusterResolver(cluster(1, 1), "worker", 0));
  torch::nn::Module m;
  m.register_parameter("counts", torch::zeros({3}, torch::kLong), /*requires_grad=*/false);
  EXPECT_NE(error_of([&] { s.create_variables(m, SGD{}); }).find("the parameter 'counts' is Long"),
            std::string::npos);
}

TEST(StepTensorTest, RoundTripsAndRefusesDamagedBytes) {
  for (const torch::Tensor& t : {torch::randn({3, 4}), torch::arange(5, torch::kLong),
                                 torch::tensor(2.5, torch::kDouble), torch::zeros({0, 2})}) {
    const torch::Tensor back = decode_tensor(encode_tensor(t));
    EXPECT_EQ(back.sizes(), t.sizes());
    EXPECT_EQ(back.scalar_type(), t.scalar_type());
    EXPECT_TRUE(torch::equal(back, t));
  }
  EXPECT_FALSE(decode_tensor(encode_tensor(torch::Tensor())).defined());
  std::string bytes = encode_tensor(torch::randn({2, 2}));
  EXPECT_NE(error_of([&] {
              decode_tensor(bytes.substr(0, bytes.size() - 1));
            }).find("wrong number of bytes"),
            std::string::npos);
  bytes[0] = static_cast<char>(100);
  EXPECT_NE(error_of([&] { decode_tensor(bytes); }).find("bad header"), std::string::npos);
}

}  // namespace
// Issue 36: a step's batch was at most the worker's shard (3-4 examples where the
// tutorial's repeat().batch(64) gives 64). Now every batch is full, across passes.
TEST(WorkerBatchesTest, EveryBatchIsFullAndRepeatsTheShardAsRepeatBatchDoes) {
  detail::WorkerBatches batches(/*examples=*/10, /*workers=*/2, /*worker=*/1, /*batch=*/64,
                                /*shuffle=*/true, /*seed=*/7);
  std::map<std::int64_t, int> seen;
  for (int step = 0; step < 5; ++step) {
    const torch::Tensor idx = batches.next();
    ASSERT_EQ(idx.numel(), 64);
    for (std::int64_t i = 0; i < idx.numel(); ++i) ++seen[idx[i].item<std::int64_t>()];
  }
  // Worker 1's shard is examples 1, 3, 5, 7, 9, each 64 times in 320 (64 passes of 5).
  ASSERT_EQ(seen.size(), 5u);
  for (const auto& [example, times] : seen) {
    EXPECT_EQ(example % 2, 1) << example;
    EXPECT_EQ(times, 64) << example;
  }
  // Without shuffling, batches continue the shard's order across the end of a pass.
  detail::WorkerBatches plain(10, 2, 0, 4, false, 0);
  EXPECT_TRUE(torch::equal(plain.next(), torch::tensor({0, 2, 4, 6}, torch::kLong)));
  EXPECT_TRUE(torch::equal(plain.next(), torch::tensor({8, 0, 2, 4}, torch::kLong)));
}

}  // namespace kolo::train
