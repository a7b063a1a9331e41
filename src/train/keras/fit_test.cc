// Tests of strategies, batching and fit/evaluate/predict in one process: the plan of who
// gets which examples (TensorFlow's documented examples), and the defining property that
// MirroredStrategy with N CPU replicas takes the same steps as one replica.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <tuple>

#include "kolo/error.h"
#include "kolo/train.h"
#include "train/testing/event_reader.h"
#include "train/testing/tiny_problem.h"

namespace kolo::train {
namespace {

std::vector<std::vector<std::int64_t>> as_lists(const std::vector<torch::Tensor>& pieces) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& t : pieces) {
    std::vector<std::int64_t> v(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel());
    out.push_back(v);
  }
  return out;
}

using Lists = std::vector<std::vector<std::int64_t>>;

TEST(Plan, GlobalBatchesAreCutIntoReplicaSlicesAsTensorFlowDoes) {
  // tf.data: range(6).batch(4) on 2 replicas -> [0,1],[2,3] then [4],[5].
  PlanOptions o;
  o.examples = 6;
  o.global_batch = 4;
  o.local_replicas = 2;
  const EpochPlan p = plan_epoch(o);
  ASSERT_EQ(p.steps, 2);
  EXPECT_EQ(as_lists(p.pieces[0]), (Lists{{0, 1}, {2, 3}}));
  EXPECT_EQ(as_lists(p.pieces[1]), (Lists{{4}, {5}}));
  // range(4).batch(4) on 5 replicas: one replica gets nothing.
  o.examples = 4;
  o.local_replicas = 5;
  const EpochPlan q = plan_epoch(o);
  ASSERT_EQ(q.steps, 1);
  EXPECT_EQ(as_lists(q.pieces[0]), (Lists{{0}, {1}, {2}, {3}, {}}));
}

TEST(Plan, DataShardingKeepsEachWorkersSlicesOfEveryGlobalBatch) {
  // TensorFlow's DATA example: 12 elements, global batch 4, 2 workers of 1 replica:
  // worker 0 [0,1],[4,5],[8,9]; worker 1 [2,3],[6,7],[10,11].
  for (int w = 0; w < 2; ++w) {
    PlanOptions o;
    o.examples = 12;
    o.global_batch = 4;
    o.workers = 2;
    o.worker = w;
    const EpochPlan p = plan_epoch(o);
    ASSERT_EQ(p.steps, 3);
    for (std::int64_t s = 0; s < 3; ++s) {
      const std::int64_t a = 4 * s + 2 * w;
      EXPECT_EQ(as_lists(p.pieces[static_cast<std::size_t>(s)]), (Lists{{a, a + 1}}));
    }
  }
  // 2 workers x 2 replicas: worker 1 holds global replicas 2 and 3.
  PlanOptions o;
  o.examples = 8;
  o.global_batch = 8;
  o.workers = 2;
  o.worker = 1;
  o.local_replicas = 2;
  EXPECT_EQ(as_lists(plan_epoch(o).pieces[0]), (Lists{{4, 5}, {6, 7}}));
}

TEST(Plan, OffAndFileGiveEachWorkerItsOwnBatchesOfItsShare) {
  PlanOptions o;
  o.examples = 6;
  o.global_batch = 4;
  o.workers = 2;
  o.worker = 1;
  o.policy = AutoShardPolicy::kOff;
  const EpochPlan p = plan_epoch(o);  // every worker: batches of 2 over all 6 examples
  ASSERT_EQ(p.steps, 3);
  EXPECT_EQ(as_lists(p.pieces[2]), (Lists{{4, 5}}));
  o.policy = AutoShardPolicy::kFile;
  o.force_steps = 5;  // the longest worker needs 5: the others run empty steps
  const EpochPlan f = plan_epoch(o);
  ASSERT_EQ(f.steps, 5);
  EXPECT_EQ(as_lists(f.pieces[4]), (Lists{{}}));
}

TEST(Plan, ShuffleIsTheSameOnEveryWorkerAndNewEveryEpoch) {
  PlanOptions o;
  o.examples = 50;
  o.global_batch = 50;
  o.shuffle = true;
  o.seed = 7;
  const auto e0 = as_lists(plan_epoch(o).pieces[0]);
  EXPECT_EQ(as_lists(plan_epoch(o).pieces[0]), e0);
  o.epoch = 1;
  const auto e1 = as_lists(plan_epoch(o).pieces[0]);
  EXPECT_NE(e1, e0);
  auto sorted = e1[0];
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[static_cast<std::size_t>(i)], i);
}

TEST(Plan, StepsPerEpochCapsTheEpoch) {
  PlanOptions o;
  o.examples = 100;
  o.global_batch = 10;
  o.max_steps = 3;
  EXPECT_EQ(plan_epoch(o).steps, 3);
  o.global_batch = 0;
  EXPECT_THROW(plan_epoch(o), kolo::Error);
}

TEST(Data, FileShardingNeedsAFilePerWorker) {
  auto load = [](const std::string& f) {
    const auto v = static_cast<float>(f.size());
    return std::make_pair(torch::full({2, 1}, v), torch::zeros({2}, torch::kLong));
  };
  Dataset d = Dataset::from_files({"a", "bb", "ccc"}, load);
  EXPECT_EQ(d.load_for_worker(1, 2).size(), 2);  // worker 1 of 2: file "bb"
  EXPECT_EQ(d.load_for_worker(1, 2).x()[0].item<float>(), 2.0f);
  EXPECT_EQ(d.load_for_worker(0, 2).size(), 4);  // files "a" and "ccc"
  try {
    d.load_for_worker(0, 4);
    FAIL() << "no error with 3 files for 4 workers";
  } catch (const kolo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 files, fewer than the 4 workers"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(d.with_auto_shard_policy(AutoShardPolicy::kData).load_for_worker(0, 4).size(), 6);
}

TEST(Strategy, DevicesAndReplicaCounts) {
  Strategy d;
  EXPECT_EQ(d.name(), "default");
  EXPECT_EQ(d.num_replicas_in_sync(), 1);
  EXPECT_TRUE(d.is_chief());
  MirroredStrategy m({"cpu:0", "/device:CPU:1", "CPU:2"});
  EXPECT_EQ(m.num_local_replicas(), 3);
  EXPECT_EQ(m.num_replicas_in_sync(), 3);
  EXPECT_THROW(MirroredStrategy({"tpu:0"}), kolo::Error);
  EXPECT_THROW(OneDeviceStrategy("gpu:7"), kolo::Error);  // no GPU on this machine
}

TEST(Strategy, RunAndReduceOverReplicas) {
  MirroredStrategy m({"cpu:0", "cpu:1"});
  PerReplica v = m.run([](const ReplicaContext& c) {
    return torch::full({2, 3}, static_cast<float>(c.replica_id_in_sync_group + 1));
  });
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(torch::equal(m.reduce(ReduceOp::kSum, v), torch::full({2, 3}, 3.0f)));
  EXPECT_TRUE(torch::equal(m.reduce(ReduceOp::kAverage, v), torch::full({2, 3}, 1.5f)));
  // axis 0: also over the rows; the mean divides by all 4 rows.
  EXPECT_TRUE(torch::allclose(m.reduce(ReduceOp::kAverage, v, 0), torch::full({3}, 1.5f)));
  EXPECT_TRUE(torch::equal(m.reduce(ReduceOp::kSum, v, 0), torch::full({3}, 6.0f)));
  EXPECT_THROW(m.run([](const ReplicaContext& c) -> torch::Tensor {
    if (c.local_replica_id == 1) throw std::runtime_error("replica 1 fails");
    return torch::zeros({1});
  }),
               std::runtime_error);
}

TEST(Strategy, DistributeGivesEachReplicaItsSliceForACustomLoop) {
  MirroredStrategy m({"cpu:0", "cpu:1"});
  const torch::Tensor x = torch::arange(10, torch::kFloat32).reshape({10, 1});
  DistributedDataset d = m.distribute(Dataset::from_tensors(x, x.squeeze(1)), 4);
  ASSERT_EQ(d.steps(), 3);
  std::vector<float> seen;
  for (const DistributedBatch& b : d) {
    ASSERT_EQ(b.x.size(), 2u);
    // A custom step: each replica sums its slice; reduce adds them up.
    PerReplica sums = m.run([&](const ReplicaContext& c) { return b.x[c.local_replica_id].sum(); });
    seen.push_back(m.reduce(ReduceOp::kSum, sums).item<float>());
  }
  EXPECT_EQ(seen, (std::vector<float>{0 + 1 + 2 + 3, 4 + 5 + 6 + 7, 8 + 9}));
  d = m.distribute(Dataset::from_tensors(x), 10, {.shuffle = true, .seed = 3});
  const auto first = d.batch(0).x[0].clone();
  d.set_epoch(1);
  EXPECT_FALSE(torch::equal(first, d.batch(0).x[0]));
  EXPECT_FALSE(d.batch(0).y[0].defined());
}

// Trains `steps` batches of the tiny problem from the fixed initial weights and returns
// the parameters.
std::vector<torch::Tensor> train(Strategy strategy, const OptimizerSpec& opt, std::int64_t batch,
                                 int epochs) {
  const auto p = testing::tiny_problem();
  Model model(testing::tiny_net(), strategy);
  model.compile(opt, std::make_shared<SparseCategoricalCrossentropy>(true), {"accuracy"});
  model.fit(p.x, p.y, {.epochs = epochs, .batch_size = batch, .verbose = 0, .shuffle = true});
  std::vector<torch::Tensor> out;
  for (const auto& [name, t] : model.get_weights()) out.push_back(t);
  return out;
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    EXPECT_LT(diff, 2e-5) << what << ": parameter " << i << " differs by " << diff;
  }
}

TEST(Fit, MirroredReplicasTakeTheStepsOfOneReplica) {
  for (const OptimizerSpec& opt : {OptimizerSpec(SGD{.learning_rate = 0.1, .momentum = 0.9}),
                                   OptimizerSpec(Adam{.learning_rate = 0.01})}) {
    const auto one = train(Strategy(), opt, 16, 3);
    const auto two = train(MirroredStrategy({"cpu:0", "cpu:1"}), opt, 16, 3);
    const auto four = train(MirroredStrategy({"cpu:0", "cpu:1", "cpu:2", "cpu:3"}), opt, 16, 3);
    expect_close(one, two, optimizer_name(opt) + ", 2 replicas");
    expect_close(one, four, optimizer_name(opt) + ", 4 replicas");
    // And the training did move the weights.
    const auto start = train(Strategy(), opt, 16, 0);
    EXPECT_GT((one[0] - start[0]).abs().max().item<double>(), 1e-3);
  }
}

TEST(Fit, LogsAreExactOverReplicasAndEvaluateMatchesAManualPass) {
  const auto p = testing::tiny_problem();
  for (Strategy s : {Strategy(), Strategy(MirroredStrategy({"cpu:0", "cpu:1", "cpu:2"}))}) {
    Model model(testing::tiny_net(), s);
    model.compile(SGD{.learning_rate = 0.05}, std::make_shared<SparseCategoricalCrossentropy>(true),
                  {"accuracy"});
    History h = model.fit(p.x, p.y,
                          {.epochs = 2, .batch_size = 20, .verbose = 0, .validation_split = 0.25});
    ASSERT_EQ(h.history["loss"].size(), 2u) << s.name();
    ASSERT_EQ(h.history["val_accuracy"].size(), 2u) << s.name();
    // evaluate over uneven slices (batch 7 over 3 replicas, a partial last batch) equals a
    // plain forward pass over all examples.
    const Logs logs = model.evaluate(p.x, p.y, {.batch_size = 7, .verbose = 0});
    torch::NoGradGuard no_grad;
    model.module().eval();
    const torch::Tensor out = model.module().as<torch::nn::Sequential>()->forward(p.x);
    const double loss = torch::nn::functional::cross_entropy(out, p.y).item<double>();
    const double acc = out.argmax(1).eq(p.y).to(torch::kFloat64).mean().item<double>();
    EXPECT_NEAR(*logs.get("loss"), loss, 1e-5) << s.name();
    EXPECT_NEAR(*logs.get("accuracy"), acc, 1e-12) << s.name();
    // predict returns every example's output in order.
    const torch::Tensor pred = model.predict(p.x, {.batch_size = 10});
    EXPECT_TRUE(torch::allclose(pred, out, 1e-5, 1e-6)) << s.name();
    // The validation values are those of the last 25% (taken before shuffling).
    const Logs val = model.evaluate(p.x.slice(0, 72), p.y.slice(0, 72), {.verbose = 0});
    EXPECT_EQ(h.history["val_loss"].size(), 2u);
    (void)val;
  }
}

// Data whose examples do not fit the first Dense layer (the founding program's 28x28
// images into input_shape 784) is refused by fit, evaluate and predict before any step,
// naming the layer and both shapes, as Keras does; libtorch's own error named neither.
TEST(Fit, DataOfAnotherShapeThanTheFirstLayerIsRefusedNamingBoth) {
  Model model(Sequential({Dense(16, "relu", 784), Dense(10)}));
  model.compile(Adam{}, std::string("sparse_categorical_crossentropy"));
  const torch::Tensor images = torch::rand({12, 28, 28});
  const torch::Tensor labels = torch::zeros({12}, torch::kInt64);
  const std::string want =
      "input 0 of layer '0' (Linear, in_features=784) is incompatible with the data: "
      "expected shape=(None, 784), found shape=(None, 28, 28); reshape x";
  for (const char* what : {"fit", "evaluate", "predict"}) {
    try {
      if (std::string(what) == "fit") model.fit(images, labels, {.verbose = 0});
      if (std::string(what) == "evaluate") model.evaluate(images, labels, {.verbose = 0});
      if (std::string(what) == "predict") model.predict(images);
      FAIL() << what << " took 28x28 images into a 784-input layer";
    } catch (const kolo::Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(std::string("Model::") + what + ": " + want),
                std::string::npos)
          << e.what();
    }
  }
  // Flattened, the same data trains.
  EXPECT_NO_THROW(model.fit(images.reshape({12, -1}), labels, {.verbose = 0}));
}

TEST(Fit, ErrorsNameTheProblem) {
  const auto p = testing::tiny_problem();
  Model model(testing::tiny_net());
  try {
    model.fit(p.x, p.y);
    FAIL() << "fit before compile";
  } catch (const kolo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not compiled"), std::string::npos) << e.what();
  }
  model.compile(Adam{}, std::string("sparse_categorical_crossentropy"));
  EXPECT_THROW(model.fit(p.x, p.y.slice(0, 10)), kolo::Error);
  EXPECT_THROW(model.fit(p.x, p.y, {.verbose = 0, .validation_split = 1.5}), kolo::Error);
  // A label that is no class of the output: the loss names it (on the CPU, gather finds it).
  torch::Tensor bad = p.y.clone();
  bad[5] = 7;
  try {
    model.fit(p.x, bad, {.verbose = 0});
    FAIL() << "no error for label 7 of 3 classes";
  } catch (const kolo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 7 is not a class"), std::string::npos) << e.what();
  }
}

TEST(Fit, CallbacksSeeKerasHookOrderAndStopTraining) {
  struct Recorder : Callback {
    std::vector<std::string> events;
    void on_train_begin(Logs&) override { events.push_back("train_begin"); }
    void on_epoch_begin(int e, Logs&) override {
      events.push_back("epoch_begin " + std::to_string(e));
    }
    void on_train_batch_end(int b, Logs& logs) override {
      events.push_back("batch_end " + std::to_string(b));
      if (b == 1 && logs.contains("loss")) host().set_stop_training(true);
    }
    void on_test_begin(Logs&) override { events.push_back("test_begin"); }
    void on_epoch_end(int e, Logs& logs) override {
      events.push_back("epoch_end " + std::to_string(e) +
                       (logs.contains("val_loss") ? " val" : ""));
    }
    void on_train_end(Logs&) override { events.push_back("train_end"); }
  };
  const auto p = testing::tiny_problem();
  Model model(testing::tiny_net());
  model.compile(Adam{}, std::make_shared<SparseCategoricalCrossentropy>(true));
  auto rec = std::make_shared<Recorder>();
  History h = model.fit(
      p.x, p.y,
      {.epochs = 3, .batch_size = 8, .verbose = 0, .callbacks = {rec}, .validation_split = 0.5});
  const std::vector<std::string> want = {"train_begin", "epoch_begin 0", "batch_end 0",
                                         "batch_end 1", "test_begin",    "epoch_end 0 val",
                                         "train_end"};
  EXPECT_EQ(rec->events, want);
  EXPECT_EQ(h.epochs, std::vector<int>{0});
  EXPECT_EQ(model.iterations(), 2);
}

// A fit with the TensorBoard callback writes event files that an independent reader
// (framing, both CRCs, its own protobuf decoding) reads back with History's values.
TEST(Fit, TensorBoardLogsOfAFitRunHoldHistorysValues) {
  const std::string dir = ::testing::TempDir() + "kolo_fit_tb_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const auto p = testing::tiny_problem();
  Model model(testing::tiny_net(), MirroredStrategy({"cpu:0", "cpu:1"}));
  model.compile(Adam{}, std::make_shared<SparseCategoricalCrossentropy>(true), {"accuracy"});
  auto tb = std::make_shared<TensorBoard>(TensorBoardOptions{.log_dir = dir, .update_freq = 2});
  History h = model.fit(
      p.x, p.y,
      {.epochs = 3, .batch_size = 16, .verbose = 0, .callbacks = {tb}, .validation_split = 0.25});
  const auto train_files = kolo::testing::event_files(dir + "/train");
  const auto val_files = kolo::testing::event_files(dir + "/validation");
  ASSERT_EQ(train_files.size(), 1u);
  ASSERT_EQ(val_files.size(), 1u);
  const auto train = kolo::testing::read_event_file(train_files[0]);
  const auto val = kolo::testing::read_event_file(val_files[0]);
  ASSERT_FALSE(train.empty());
  EXPECT_EQ(train[0].file_version, std::optional<std::string>("brain.Event:2"));
  using Want = std::tuple<std::string, const std::vector<kolo::testing::ReadEvent>*, std::string>;
  for (const auto& [tag, events, key] :
       std::vector<Want>{{"epoch_loss", &train, "loss"},
                         {"epoch_accuracy", &train, "accuracy"},
                         {"epoch_loss", &val, "val_loss"},
                         {"epoch_accuracy", &val, "val_accuracy"}}) {
    const auto got = kolo::testing::scalars(*events, tag);
    ASSERT_EQ(got.size(), 3u) << tag << " " << key;
    for (std::size_t e = 0; e < 3; ++e) {
      EXPECT_EQ(got[e].first, static_cast<std::int64_t>(e)) << tag;
      EXPECT_FLOAT_EQ(got[e].second, static_cast<float>(h.history[key][e])) << tag << " " << key;
    }
  }
  // 72 training examples, batch 16: 5 steps an epoch, 15 in all; batch scalars every 2.
  const auto batch = kolo::testing::scalars(train, "batch_loss");
  ASSERT_EQ(batch.size(), 7u);
  EXPECT_EQ(batch.back().first, 14);
  EXPECT_EQ(model.iterations(), 15);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kolo::train
