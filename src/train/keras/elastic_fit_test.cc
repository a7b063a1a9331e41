// Tests of elastic fit (FitOptions::elastic) in one process: the plans of the rest of an
// epoch after the workers changed cover every example once; commits do not change
// training; a failure mid-epoch (kolo::WorkersChanged from a callback, with the test's
// reset step) restores the last commit and ends with the weights and logs of a run without
// it, each epoch begun and ended once; and what elastic fit refuses. Real processes under
// kolorun: tests/elastic/fit_elastic_test.sh.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kolo/error.h"
#include "kolo/kolo.h"
#include "kolo/train.h"
#include "train/keras/fit_loop.h"
#include "train/testing/tiny_problem.h"

namespace kolo::train {
namespace {

// Counts, per example, how often the plans' pieces hold it over steps [from, to) for
// `workers` workers of `local` replicas each.
void count_steps(std::vector<int>& count, PlanOptions o, int workers, int local, std::int64_t from,
                 std::int64_t to) {
  o.workers = workers;
  o.local_replicas = local;
  for (int w = 0; w < workers; ++w) {
    o.worker = w;
    const EpochPlan p = plan_epoch(o);
    ASSERT_GE(p.steps, to) << workers << " workers";
    for (std::int64_t s = from; s < to; ++s) {
      for (const torch::Tensor& piece : p.pieces[static_cast<std::size_t>(s)]) {
        const auto* idx = piece.data_ptr<std::int64_t>();
        for (std::int64_t i = 0; i < piece.numel(); ++i) ++count[static_cast<std::size_t>(idx[i])];
      }
    }
  }
}

TEST(ElasticPlan, TheRestOfAnEpochAfterAShrinkAndAGrowTrainsEachExampleOnce) {
  PlanOptions o;
  o.examples = 103;  // a partial last batch
  o.global_batch = 10;
  o.shuffle = true;
  o.seed = 3;
  o.epoch = 2;
  // The number of steps does not depend on the workers.
  for (int w : {1, 2, 3, 4}) {
    o.workers = w;
    EXPECT_EQ(plan_epoch(o).steps, 11) << w << " workers";
  }
  for (int local : {1, 2}) {
    std::vector<int> count(103, 0);
    count_steps(count, o, 3, local, 0, 4);   // 3 workers, steps 0-3
    count_steps(count, o, 2, local, 4, 7);   // one left: 2 workers from step 4
    count_steps(count, o, 4, local, 7, 11);  // two joined: 4 workers from step 7
    for (std::size_t i = 0; i < count.size(); ++i) {
      EXPECT_EQ(count[i], 1) << "example " << i << " with " << local << " local replicas";
    }
  }
}

// The events a test needs from fit's callbacks.
struct Recorder : Callback {
  std::vector<std::string> events;
  int epoch = -1;
  // Throws kolo::WorkersChanged once, at the end of this (epoch, batch), or at the start
  // of this epoch's validation.
  int fail_epoch = -1, fail_batch = -1, fail_validation_epoch = -1;
  void on_train_begin(Logs&) override { events.push_back("train_begin"); }
  void on_epoch_begin(int e, Logs&) override {
    epoch = e;
    events.push_back("epoch_begin " + std::to_string(e));
  }
  void on_train_batch_end(int b, Logs&) override {
    events.push_back("batch " + std::to_string(epoch) + "." + std::to_string(b));
    if (epoch == fail_epoch && b == fail_batch) {
      fail_epoch = -1;
      throw WorkersChanged("rank 1 (host test) was killed by signal 9 (SIGKILL)");
    }
  }
  void on_test_begin(Logs&) override {
    events.push_back("test_begin " + std::to_string(epoch));
    if (epoch == fail_validation_epoch) {
      fail_validation_epoch = -1;
      throw WorkersChanged("rank 1 (host test) was killed by signal 9 (SIGKILL)");
    }
  }
  void on_epoch_end(int e, Logs&) override { events.push_back("epoch_end " + std::to_string(e)); }
  void on_train_end(Logs&) override { events.push_back("train_end"); }
};

struct FitRun {
  History history;
  std::vector<torch::Tensor> weights;
  std::vector<std::string> events;
  std::int64_t iterations = 0;
};

FitRun fit_tiny(bool elastic, int fail_epoch = -1, int fail_batch = -1,
                std::vector<std::function<void()>> reset_callbacks = {},
                int fail_validation_epoch = -1) {
  kolo::init();
  const auto p = testing::tiny_problem();
  Model model(testing::tiny_net(), HorovodStrategy());
  model.compile(Adam{.learning_rate = 0.01}, std::make_shared<SparseCategoricalCrossentropy>(true),
                {"accuracy"});
  auto rec = std::make_shared<Recorder>();
  rec->fail_epoch = fail_epoch;
  rec->fail_batch = fail_batch;
  rec->fail_validation_epoch = fail_validation_epoch;
  FitOptions o{.epochs = 3, .batch_size = 8, .verbose = 0, .callbacks = {rec}};
  o.validation_data = Dataset::from_tensors(p.x.slice(0, 24), p.y.slice(0, 24));
  o.elastic = {.enabled = elastic, .commit_every = 3, .reset_callbacks = reset_callbacks};
  FitRun r;
  r.history = model.fit(p.x, p.y, o);  // 96 examples: 12 batches an epoch
  for (const auto& [name, w] : model.get_weights()) r.weights.push_back(w);
  r.events = rec->events;
  r.iterations = model.iterations();
  return r;
}

void expect_same(const FitRun& a, const FitRun& b) {
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_TRUE(torch::equal(a.weights[i], b.weights[i])) << "weight " << i;
  }
  EXPECT_EQ(a.history.epochs, b.history.epochs);
  for (const auto& [name, values] : b.history.history) {
    ASSERT_TRUE(a.history.history.count(name)) << name;
    const auto& got = a.history.history.at(name);
    ASSERT_EQ(got.size(), values.size()) << name;
    for (std::size_t i = 0; i < values.size(); ++i) {
      EXPECT_NEAR(got[i], values[i], 1e-12) << name << " at epoch " << i;
    }
  }
  EXPECT_EQ(a.iterations, b.iterations);
}

TEST(ElasticFit, CommitsDoNotChangeTraining) {
  const FitRun plain = fit_tiny(false);
  const FitRun elastic = fit_tiny(true);
  expect_same(elastic, plain);
  EXPECT_EQ(elastic.events, plain.events);
  EXPECT_EQ(plain.history.epochs, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plain.iterations, 36);
}

TEST(ElasticFit, AFailureMidEpochRestoresTheLastCommitAndEndsAsARunWithoutIt) {
  const FitRun reference = fit_tiny(true);
  int resets = 0, reset_callbacks = 0;
  detail::set_elastic_reset_for_testing([&] {
    ++resets;
    return true;  // the same one-process world goes on
  });
  const FitRun failed = fit_tiny(true, 1, 7, {[&] { ++reset_callbacks; }});
  detail::set_elastic_reset_for_testing(nullptr);
  EXPECT_EQ(resets, 1);
  EXPECT_EQ(reset_callbacks, 1);
  // Batches 0-7 of epoch 1 ran, the commit after batch 6 (of 3, 6, 9) was restored:
  // batches 6 and 7 again, then the rest; the epoch began and ended once.
  std::vector<std::string> epoch1;
  int begins = 0, ends = 0, train_begins = 0;
  for (const auto& e : failed.events) {
    if (e.rfind("batch 1.", 0) == 0) epoch1.push_back(e.substr(8));
    begins += e == "epoch_begin 1";
    ends += e == "epoch_end 1";
    train_begins += e == "train_begin";
  }
  const std::vector<std::string> want = {"0", "1", "2", "3", "4", "5",  "6",
                                         "7", "6", "7", "8", "9", "10", "11"};
  EXPECT_EQ(epoch1, want);
  EXPECT_EQ(begins, 1);
  EXPECT_EQ(ends, 1);
  EXPECT_EQ(train_begins, 1);
  // The optimizer's state, the weights and the epoch's metric sums came back with the
  // commit: the result is the uninterrupted run's, bit for bit.
  expect_same(failed, reference);
}

TEST(ElasticFit, AFailureInValidationRedoesNoBatchAndEndsTheEpochOnce) {
  const FitRun reference = fit_tiny(true);
  detail::set_elastic_reset_for_testing([] { return true; });
  const FitRun failed = fit_tiny(true, 0, -1, {}, /*fail_validation_epoch=*/0);
  detail::set_elastic_reset_for_testing(nullptr);
  int batches = 0, tests = 0, ends = 0;
  for (const auto& e : failed.events) {
    batches += e.rfind("batch 0.", 0) == 0;
    tests += e == "test_begin 0";
    ends += e == "epoch_end 0";
  }
  // The commit after the epoch's last batch is the one restored: validation runs again,
  // no batch does.
  EXPECT_EQ(batches, 12);
  EXPECT_EQ(tests, 2);
  EXPECT_EQ(ends, 1);
  expect_same(failed, reference);
}

TEST(ElasticFit, RefusesWhatItCannotCarryAcrossAChange) {
  kolo::init();
  const auto p = testing::tiny_problem();
  const auto expect_error = [](const std::function<void()>& fn, const std::string& text) {
    try {
      fn();
      ADD_FAILURE() << "no error; wanted one with: " << text;
    } catch (const kolo::Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  {
    Model model(testing::tiny_net());  // the default strategy: one process alone
    model.compile(Adam{}, std::make_shared<SparseCategoricalCrossentropy>(true));
    expect_error([&] { model.fit(p.x, p.y, {.verbose = 0, .elastic = {.enabled = true}}); },
                 "the 'default' strategy trains in this process alone");
  }
  Model model(testing::tiny_net(), MultiWorkerMirroredStrategy());
  model.compile(Adam{}, std::make_shared<SparseCategoricalCrossentropy>(true));
  expect_error(
      [&] { model.fit(p.x, p.y, {.verbose = 0, .elastic = {.enabled = true, .commit_every = 0}}); },
      "commit_every must be >= 1");
  expect_error(
      [&] {
        model.fit(Dataset::from_tensors(p.x, p.y).with_auto_shard_policy(AutoShardPolicy::kOff),
                  {.verbose = 0, .elastic = {.enabled = true}});
      },
      "every worker must hold all the training data");
  expect_error(
      [&] {
        model.fit(p.x, p.y,
                  {.verbose = 0,
                   .callbacks = {std::make_shared<BackupAndRestore>(
                       BackupAndRestoreOptions{.backup_dir = "/nonexistent"})},
                   .elastic = {.enabled = true}});
      },
      "BackupAndRestore cannot run in an elastic fit");
}

}  // namespace
}  // namespace kolo::train
