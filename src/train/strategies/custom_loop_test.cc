// Custom training loops (issue 36, item 22): compute_average_loss and
// scale_regularization_loss with tf.nn's semantics; Strategy::replicate and
// all_reduce_gradients training per-replica models as one model on the global batch;
// Checkpoint, CheckpointManager and latest_checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kolo/error.h"
#include "kolo/train.h"

namespace kolo::train {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kolo::Error& e) {
    return e.what();
  }
  return "(no error)";
}

ReplicaContext replicas(int n) {
  ReplicaContext c;
  c.num_replicas_in_sync = n;
  return c;
}

TEST(ComputeAverageLoss, DividesTheSumByTheGlobalBatchAsTensorFlow) {
  const torch::Tensor per = torch::tensor({1.0, 2.0, 3.0, 4.0});
  // Default: rows x replicas in sync (4 x 2).
  EXPECT_DOUBLE_EQ(compute_average_loss(per, replicas(2)).item<double>(), 10.0 / 8);
  EXPECT_DOUBLE_EQ(compute_average_loss(per).item<double>(), 10.0 / 4);
  EXPECT_DOUBLE_EQ(compute_average_loss(per, replicas(2), {.global_batch_size = 5}).item<double>(),
                   2.0);
  EXPECT_DOUBLE_EQ(
      compute_average_loss(per, replicas(2), {.sample_weight = torch::tensor({1.0, 0.0, 1.0, 0.0})})
          .item<double>(),
      4.0 / 8);
  // A global batch of 0 gives 0, as TensorFlow's divide_no_nan.
  EXPECT_DOUBLE_EQ(compute_average_loss(per, {.global_batch_size = 0}).item<double>(), 0.0);
  // The gradient is that of the sum over the global batch.
  const torch::Tensor x = per.clone().requires_grad_(true);
  compute_average_loss(x, replicas(2)).backward();
  EXPECT_TRUE(torch::allclose(x.grad(), torch::full({4}, 1.0 / 8, x.options())));
  EXPECT_NE(error_of([] { compute_average_loss(torch::tensor(3.0)); }).find("not a scalar"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              compute_average_loss(per, {.global_batch_size = -1});
            }).find("global_batch_size -1 is negative"),
            std::string::npos);
  const std::string bad =
      error_of([&] { compute_average_loss(per, {.sample_weight = torch::ones({3})}); });
  EXPECT_NE(bad.find("sample_weight [3] does not fit per_example_loss [4]"), std::string::npos)
      << bad;
  // Keras's [batch, 1] weights weigh examples (not a [batch, batch] product), and [batch]
  // weights weigh each example's row of a [batch, steps] loss.
  const torch::Tensor w = torch::tensor({1.0f, 0.0f, 1.0f, 0.0f});
  EXPECT_DOUBLE_EQ(compute_average_loss(per, {.sample_weight = w.unsqueeze(-1)}).item<double>(),
                   4.0 / 4);
  const torch::Tensor steps = torch::ones({4, 3});
  EXPECT_DOUBLE_EQ(compute_average_loss(steps, {.sample_weight = w}).item<double>(), 6.0 / 4);
  // An infinite loss with a global batch of 0 is still 0.
  EXPECT_EQ(
      compute_average_loss(torch::tensor({INFINITY}), {.global_batch_size = 0}).item<double>(),
      0.0);
}

TEST(ScaleRegularizationLoss, SumsThenDividesByTheReplicas) {
  EXPECT_DOUBLE_EQ(scale_regularization_loss(torch::tensor({2.0, 4.0}), replicas(2)).item<double>(),
                   3.0);
  EXPECT_DOUBLE_EQ(scale_regularization_loss(torch::tensor(5.0), replicas(1)).item<double>(), 5.0);
}

// Two CPU replicas, each with its own model and optimizer, trained by a custom loop
// (compute_average_loss, all_reduce_gradients) take the steps one model takes on the
// global batch.
TEST(CustomLoop, PerReplicaModelsTrainAsOneModelOnTheGlobalBatch) {
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({16, 4});
  const torch::Tensor y = torch::randint(0, 3, {16}, torch::kLong);
  const SparseCategoricalCrossentropy loss(/*from_logits=*/true);

  MirroredStrategy strategy({"cpu:0", "cpu:1"});
  torch::manual_seed(2);
  torch::nn::Linear net(4, 3);
  std::vector<torch::nn::Linear> models = strategy.replicate(net);
  ASSERT_EQ(models.size(), 2u);
  EXPECT_TRUE(torch::equal(models[0]->weight, models[1]->weight));
  EXPECT_NE(models[0]->weight.data_ptr(), models[1]->weight.data_ptr());
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  for (auto& m : models) {
    optimizers.push_back(std::make_unique<torch::optim::SGD>(
        m->parameters(), torch::optim::SGDOptions(0.5).momentum(0.9)));
  }
  DistributedDataset data = strategy.distribute(Dataset::from_tensors(x, y), /*global=*/8);
  ASSERT_EQ(data.steps(), 2);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (const DistributedBatch& b : data) {
      strategy.run([&](const ReplicaContext& c) {
        torch::nn::Linear& m = models[static_cast<std::size_t>(c.local_replica_id)];
        m->zero_grad();
        const torch::Tensor per =
            loss.per_example(m->forward(b.x[c.local_replica_id]), b.y[c.local_replica_id]);
        const torch::Tensor l = compute_average_loss(per, c);
        l.backward();
        return l.detach();
      });
      strategy.all_reduce_gradients(models);
      strategy.run([&](const ReplicaContext& c) {
        optimizers[static_cast<std::size_t>(c.local_replica_id)]->step();
        return torch::Tensor();
      });
    }
  }
  // One model, the global batches in order, the mean loss.
  torch::manual_seed(2);
  torch::nn::Linear ref(4, 3);
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      const auto rows = torch::arange(step * 8, step * 8 + 8, torch::kLong);
      loss.per_example(ref->forward(x.index_select(0, rows)), y.index_select(0, rows))
          .mean()
          .backward();
      opt.step();
    }
  }
  for (const auto& m : models) {
    EXPECT_TRUE(torch::allclose(m->weight, ref->weight, 1e-5, 1e-6));
    EXPECT_TRUE(torch::allclose(m->bias, ref->bias, 1e-5, 1e-6));
  }
  EXPECT_FALSE(
      torch::allclose(ref->weight, strategy.replicate(torch::nn::Linear(4, 3))[0]->weight));
  // Wrong inputs are named.
  EXPECT_NE(error_of([&] {
              strategy.all_reduce_gradients(std::vector<torch::nn::Linear>{net});
            }).find("1 models for 2 local replicas"),
            std::string::npos);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/kolo-ckpt-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

// A model, its optimizer and a step counter saved mid-training and restored into fresh
// objects train on exactly as the uninterrupted run.
TEST_F(CheckpointTest, ARestoredRunContinuesAsTheUninterruptedOne) {
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({8, 3}), y = torch::randn({8, 2});
  auto train_steps = [&](torch::nn::Linear& net, torch::optim::Adam& opt, torch::Tensor& step,
                         int n) {
    for (int i = 0; i < n; ++i) {
      opt.zero_grad();
      (net->forward(x) - y).square().mean().backward();
      opt.step();
      step += 1;
    }
  };
  torch::manual_seed(5);
  torch::nn::Linear a(3, 2);
  torch::optim::Adam opt_a(a->parameters(), torch::optim::AdamOptions(0.05));
  torch::Tensor step_a = torch::zeros({}, torch::kLong);
  Checkpoint ckpt_a;
  ckpt_a.track("model", a).track("optimizer", opt_a).track("step", step_a);
  CheckpointManager manager(ckpt_a, dir_ + "/run", /*max_to_keep=*/2);
  EXPECT_FALSE(manager.latest_checkpoint());
  EXPECT_FALSE(latest_checkpoint(dir_ + "/run"));
  train_steps(a, opt_a, step_a, 3);
  const std::string saved = manager.save();
  EXPECT_EQ(saved, dir_ + "/run/ckpt-1");
  train_steps(a, opt_a, step_a, 4);  // the uninterrupted run

  torch::manual_seed(99);
  torch::nn::Linear b(3, 2);
  torch::optim::Adam opt_b(b->parameters(), torch::optim::AdamOptions(0.05));
  torch::Tensor step_b = torch::zeros({}, torch::kLong);
  Checkpoint ckpt_b;
  ckpt_b.track("model", b).track("optimizer", opt_b).track("step", step_b);
  CheckpointManager again(ckpt_b, dir_ + "/run", 2);  // a restarted program
  EXPECT_EQ(again.restore_or_initialize(), std::optional<std::string>(saved));
  EXPECT_EQ(step_b.item<std::int64_t>(), 3);
  EXPECT_EQ(ckpt_b.save_counter(), 1);
  train_steps(b, opt_b, step_b, 4);
  EXPECT_TRUE(torch::allclose(a->weight, b->weight, 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(a->bias, b->bias, 1e-6, 1e-7));
  EXPECT_EQ(step_b.item<std::int64_t>(), 7);
}

TEST_F(CheckpointTest, TheManagerKeepsTheNewestAndTheStateFileNamesTheLatest) {
  torch::nn::Linear net(2, 2);
  Checkpoint ckpt;
  ckpt.track("net", net);
  CheckpointManager manager(ckpt, dir_, /*max_to_keep=*/2);
  for (int i = 0; i < 4; ++i) manager.save();
  EXPECT_EQ(manager.checkpoints(), (std::vector<std::string>{dir_ + "/ckpt-3", dir_ + "/ckpt-4"}));
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt-1"));
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt-2"));
  EXPECT_TRUE(fs::exists(dir_ + "/ckpt-4"));
  EXPECT_EQ(latest_checkpoint(dir_), std::optional<std::string>(dir_ + "/ckpt-4"));
  std::ifstream state(dir_ + "/checkpoint");
  std::string text((std::istreambuf_iterator<char>(state)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text,
            "model_checkpoint_path: \"ckpt-4\"\nall_model_checkpoint_paths: \"ckpt-3\"\n"
            "all_model_checkpoint_paths: \"ckpt-4\"\n");
  // A given number; and a manager made again finds the kept ones.
  EXPECT_EQ(manager.save(10), dir_ + "/ckpt-10");
  CheckpointManager again(ckpt, dir_, 2);
  EXPECT_EQ(again.checkpoints(), (std::vector<std::string>{dir_ + "/ckpt-4", dir_ + "/ckpt-10"}));
  // Checkpoint::save on its own: prefix-<counter>, and the state file names it.
  EXPECT_EQ(ckpt.save(dir_ + "/other/x"), dir_ + "/other/x-6") << "the counter counts every save";
  EXPECT_EQ(latest_checkpoint(dir_ + "/other"), std::optional<std::string>(dir_ + "/other/x-6"));
  EXPECT_NE(error_of([&] { CheckpointManager(ckpt, dir_, 0); }).find("keep at least 1"),
            std::string::npos);
  // The directory spelled with a trailing '/' finds the same checkpoints after a restart.
  CheckpointManager slash(ckpt, dir_ + "/", 2);
  EXPECT_EQ(slash.checkpoints(), again.checkpoints());
  const std::string next = slash.save();
  CheckpointManager restarted(ckpt, dir_ + "/./", 2);
  EXPECT_EQ(restarted.latest_checkpoint(), std::optional<std::string>(next));
  EXPECT_EQ(latest_checkpoint(dir_ + "/"), std::optional<std::string>(next));
}

TEST_F(CheckpointTest, RestoringIntoOtherObjectsNamesWhatDoesNotFit) {
  torch::nn::Linear net(2, 3);
  Checkpoint ckpt;
  ckpt.track("net", net);
  const std::string path = ckpt.write(dir_ + "/one");
  torch::nn::Linear other(2, 4);
  Checkpoint wrong_shape;
  wrong_shape.track("net", other);
  const std::string shape = error_of([&] { wrong_shape.restore(path); });
  EXPECT_NE(shape.find("parameter 'weight' of module 'net' is [3, 2] there but [4, 2] here"),
            std::string::npos)
      << shape;
  Checkpoint wrong_name;
  wrong_name.track("model", net);
  const std::string name = error_of([&] { wrong_name.restore(path); });
  EXPECT_NE(name.find("it holds no module 'model'"), std::string::npos) << name;
  const std::string missing = error_of([&] { ckpt.restore(dir_ + "/none"); });
  EXPECT_NE(missing.find(dir_ + "/none"), std::string::npos) << missing;
  EXPECT_NE(error_of([&] { ckpt.track("net", other); }).find("'net' is tracked already"),
            std::string::npos);
}

}  // namespace
}  // namespace kolo::train
