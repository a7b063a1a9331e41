// Tests of the TensorBoard callback (summary.h) driven through fit's hooks by a fake
// TrainingHost: the train/ and validation/ files, read by the independent reader
// (testing/event_reader.h), hold exactly the expected tags, steps and values; other
// workers write nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kolo/train/summary.h"
#include "train/testing/event_reader.h"
#include "train/testing/temp_dir.h"

namespace kolo::train {
namespace {

namespace fs = std::filesystem;
using kolo::testing::read_event_file;
using kolo::testing::ReadEvent;
using TempDir = kolo::testing::TempDirTest;

double now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

class FakeHost : public TrainingHost {
 public:
  bool chief = true;
  std::int64_t iterations_ = 0;
  double lr = 0.1;
  std::vector<std::pair<std::string, torch::Tensor>> weights;

  bool stop_training() const override { return false; }
  void set_stop_training(bool) override {}
  double learning_rate() const override { return lr; }
  void set_learning_rate(double v) override { lr = v; }
  std::optional<double> momentum() const override { return std::nullopt; }
  void set_momentum(double) override {}
  std::vector<std::pair<std::string, torch::Tensor>> get_weights() const override {
    return weights;
  }
  void set_weights(const std::vector<std::pair<std::string, torch::Tensor>>& w) override {
    weights = w;
  }
  void save(const std::string&, bool,
            const std::vector<std::pair<std::string, double>>&) const override {}
  std::vector<std::pair<std::string, double>> load(const std::string&, bool) override { return {}; }
  bool is_chief() const override { return chief; }
  int num_workers() const override { return 2; }
  int num_replicas_in_sync() const override { return 2; }
  std::int64_t iterations() const override { return iterations_; }
  void resume_at_epoch(int) override {}
  std::vector<double> average_over_workers(const std::vector<double>& v) override { return v; }
  void broadcast_weights_from_chief() override {}
};

// Known values (exact in float) for batch, epoch and validation logs.
float batch_loss(std::int64_t iteration) { return 1.0f / static_cast<float>(1 << iteration); }
float epoch_loss(int epoch) { return 2.0f - 0.5f * epoch; }
float val_loss(int epoch) { return 3.0f - 0.25f * epoch; }
double learning_rate(int epoch) { return 0.5 / (1 << epoch); }

// What fit() does with its callbacks: `validate` runs an evaluation (on_test_begin/end)
// before each on_epoch_end, as Keras's fit does.
void run_fit(TensorBoard& tb, FakeHost& host, int epochs, int steps, bool validate) {
  Logs none;
  tb.on_train_begin(none);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    host.lr = learning_rate(epoch);
    tb.on_epoch_begin(epoch, none);
    for (int batch = 0; batch < steps; ++batch) {
      tb.on_train_batch_begin(batch, none);
      ++host.iterations_;
      Logs logs{{"loss", batch_loss(host.iterations_)}, {"accuracy", 0.5}};
      tb.on_train_batch_end(batch, logs);
    }
    Logs logs{{"loss", epoch_loss(epoch)}, {"accuracy", 0.75}};
    if (validate) {
      tb.on_test_begin(none);
      Logs test{{"loss", val_loss(epoch)}, {"accuracy", 0.625}};
      tb.on_test_end(test);
      logs.set("val_loss", val_loss(epoch));
      logs.set("val_accuracy", 0.625);
    }
    tb.on_epoch_end(epoch, logs);
  }
  tb.on_train_end(none);
}

using TagSteps = std::vector<std::pair<std::string, std::int64_t>>;

// Every event after the file_version one carries exactly one value; their (tag, step).
TagSteps tag_steps(const std::vector<ReadEvent>& events) {
  TagSteps out;
  EXPECT_FALSE(events.empty());
  if (events.empty()) return out;
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  for (std::size_t i = 1; i < events.size(); ++i) {
    EXPECT_FALSE(events[i].file_version.has_value());
    EXPECT_EQ(events[i].values.size(), 1u);
    EXPECT_EQ(events[i].unknown_fields, 0);
    for (const auto& v : events[i].values) out.emplace_back(v.tag, events[i].step);
  }
  return out;
}

std::vector<ReadEvent> only_file(const std::string& dir) {
  const auto files = kolo::testing::event_files(dir);
  EXPECT_EQ(files.size(), 1u) << dir;
  return files.empty() ? std::vector<ReadEvent>{} : read_event_file(files[0]);
}

class TensorBoardCallback : public TempDir {
 protected:
  FakeHost host_;
};

TEST_F(TensorBoardCallback, EveryScalarHistogramAndEvaluationAtItsStep) {
  TensorBoardOptions o;
  o.log_dir = dir_;
  o.update_freq = 2;
  o.histogram_freq = 1;
  o.write_steps_per_second = true;
  TensorBoard tb(o);
  host_.weights = {{"fc1.weight", torch::tensor({{1.0, 2.0}, {3.0, 4.0}})},
                   {"fc1.bias", torch::tensor({0.5f, -0.5f})},
                   {"bn.num_batches_tracked", torch::tensor(7, torch::kLong)}};
  tb.set_host(&host_);
  const double before = now();
  run_fit(tb, host_, /*epochs=*/2, /*steps=*/3, /*validate=*/true);

  // train/: batch scalars after iterations 2, 4 and 6; epoch scalars and histograms at
  // epochs 0 and 1, in the order written.
  const auto train = only_file(dir_ + "/train");
  TagSteps expected;
  auto batch = [&](std::int64_t it) {
    expected.insert(expected.end(),
                    {{"batch_steps_per_second", it}, {"batch_loss", it}, {"batch_accuracy", it}});
  };
  auto epoch = [&](std::int64_t e) {
    expected.insert(expected.end(), {{"epoch_loss", e},
                                     {"epoch_accuracy", e},
                                     {"epoch_learning_rate", e},
                                     {"epoch_steps_per_second", e},
                                     {"fc1/weight/histogram", e},
                                     {"fc1/bias/histogram", e}});
  };
  batch(2);
  epoch(0);
  batch(4);
  batch(6);
  epoch(1);
  EXPECT_EQ(tag_steps(train), expected);
  for (const auto& e : train) EXPECT_GE(e.wall_time, std::floor(before));

  using Points = std::vector<std::pair<std::int64_t, float>>;
  using kolo::testing::scalars;
  EXPECT_EQ(scalars(train, "batch_loss"),
            (Points{{2, batch_loss(2)}, {4, batch_loss(4)}, {6, batch_loss(6)}}));
  EXPECT_EQ(scalars(train, "batch_accuracy"), (Points{{2, 0.5f}, {4, 0.5f}, {6, 0.5f}}));
  EXPECT_EQ(scalars(train, "epoch_loss"), (Points{{0, epoch_loss(0)}, {1, epoch_loss(1)}}));
  EXPECT_EQ(scalars(train, "epoch_accuracy"), (Points{{0, 0.75f}, {1, 0.75f}}));
  EXPECT_EQ(scalars(train, "epoch_learning_rate"),
            (Points{{0, static_cast<float>(learning_rate(0))},
                    {1, static_cast<float>(learning_rate(1))}}));
  for (const char* rate : {"batch_steps_per_second", "epoch_steps_per_second"}) {
    for (const auto& [step, value] : scalars(train, rate)) {
      EXPECT_TRUE(std::isfinite(value) && value > 0) << rate << " at " << step << ": " << value;
    }
  }
  for (const auto& e : train) {
    for (const auto& v : e.values) {
      if (v.tag != "fc1/weight/histogram") continue;
      ASSERT_TRUE(v.histo.has_value());
      EXPECT_EQ(v.histo->min, 1);
      EXPECT_EQ(v.histo->max, 4);
      EXPECT_EQ(v.histo->num, 4);
      EXPECT_EQ(v.histo->sum, 10);
      EXPECT_EQ(v.histo->sum_squares, 30);
    }
  }

  // validation/: fit's evaluations at the iterations they ran after, then the "val_"
  // entries of each epoch without the prefix.
  const auto validation = only_file(dir_ + "/validation");
  EXPECT_EQ(tag_steps(validation), (TagSteps{{"evaluation_loss_vs_iterations", 3},
                                             {"evaluation_accuracy_vs_iterations", 3},
                                             {"epoch_loss", 0},
                                             {"epoch_accuracy", 0},
                                             {"evaluation_loss_vs_iterations", 6},
                                             {"evaluation_accuracy_vs_iterations", 6},
                                             {"epoch_loss", 1},
                                             {"epoch_accuracy", 1}}));
  EXPECT_EQ(scalars(validation, "epoch_loss"), (Points{{0, val_loss(0)}, {1, val_loss(1)}}));
  EXPECT_EQ(scalars(validation, "evaluation_loss_vs_iterations"),
            (Points{{3, val_loss(0)}, {6, val_loss(1)}}));
  EXPECT_EQ(scalars(validation, "epoch_accuracy"), (Points{{0, 0.625f}, {1, 0.625f}}));
}

TEST_F(TensorBoardCallback, DefaultsWriteEpochScalarsOnlyAndNoValidationRun) {
  TensorBoardOptions o;
  o.log_dir = dir_;
  TensorBoard tb(o);
  host_.weights = {{"w", torch::ones({2})}};
  tb.set_host(&host_);
  run_fit(tb, host_, /*epochs=*/3, /*steps=*/2, /*validate=*/false);
  TagSteps expected;
  for (std::int64_t e = 0; e < 3; ++e) {
    expected.insert(expected.end(),
                    {{"epoch_loss", e}, {"epoch_accuracy", e}, {"epoch_learning_rate", e}});
  }
  EXPECT_EQ(tag_steps(only_file(dir_ + "/train")), expected);
  EXPECT_FALSE(fs::exists(dir_ + "/validation"));
}

TEST_F(TensorBoardCallback, HistogramsEveryNthEpochFromTheFirst) {
  TensorBoardOptions o;
  o.log_dir = dir_;
  o.histogram_freq = 2;
  TensorBoard tb(o);
  host_.weights = {{"encoder.0.weight", torch::arange(6, torch::kFloat).reshape({2, 3})}};
  tb.set_host(&host_);
  run_fit(tb, host_, /*epochs=*/5, /*steps=*/1, /*validate=*/false);
  std::vector<std::int64_t> steps;
  for (const auto& [tag, step] : tag_steps(only_file(dir_ + "/train"))) {
    if (tag == "encoder/0/weight/histogram") steps.push_back(step);
  }
  EXPECT_EQ(steps, (std::vector<std::int64_t>{0, 2, 4}));
}

TEST_F(TensorBoardCallback, EvaluateAfterFitWritesANewValidationFile) {
  TensorBoardOptions o;
  o.log_dir = dir_;
  TensorBoard tb(o);
  tb.set_host(&host_);
  run_fit(tb, host_, /*epochs=*/1, /*steps=*/4, /*validate=*/true);
  Logs none, test{{"loss", 0.25}, {"accuracy", 0.875}};
  tb.on_test_begin(none);
  tb.on_test_end(test);  // an evaluate() outside fit: flushed at its end

  const auto files = kolo::testing::event_files(dir_ + "/validation");
  ASSERT_EQ(files.size(), 2u);
  // Sorted by name: the creation second, then the number; the second file is evaluate's.
  const auto after = read_event_file(files[1]);
  EXPECT_EQ(tag_steps(after), (TagSteps{{"evaluation_loss_vs_iterations", 4},
                                        {"evaluation_accuracy_vs_iterations", 4}}));
  EXPECT_EQ(kolo::testing::scalars(after, "evaluation_accuracy_vs_iterations"),
            (std::vector<std::pair<std::int64_t, float>>{{4, 0.875f}}));
}

TEST_F(TensorBoardCallback, EvaluateWithoutFitWritesValidationOnly) {
  TensorBoardOptions o;
  o.log_dir = dir_;
  TensorBoard tb(o);
  tb.set_host(&host_);
  host_.iterations_ = 17;
  Logs none, test{{"loss", 0.5}};
  tb.on_test_begin(none);
  tb.on_test_end(test);
  EXPECT_EQ(tag_steps(only_file(dir_ + "/validation")),
            (TagSteps{{"evaluation_loss_vs_iterations", 17}}));
  EXPECT_FALSE(fs::exists(dir_ + "/train"));
}

TEST_F(TensorBoardCallback, NonChiefWritesNothing) {
  TensorBoardOptions o;
  o.log_dir = dir_;
  o.update_freq = 1;
  o.histogram_freq = 1;
  o.write_steps_per_second = true;
  TensorBoard tb(o);
  host_.chief = false;
  host_.weights = {{"w", torch::ones({2})}};
  tb.set_host(&host_);
  run_fit(tb, host_, /*epochs=*/2, /*steps=*/2, /*validate=*/true);
  Logs none, test{{"loss", 0.5}};
  tb.on_test_end(test);
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(TensorBoardCallback, EachFitStartsNewFilesWithStepsGoingOn) {
  TensorBoardOptions o;
  o.log_dir = dir_;
  o.update_freq = 1;
  TensorBoard tb(o);
  tb.set_host(&host_);
  run_fit(tb, host_, /*epochs=*/1, /*steps=*/2, /*validate=*/false);
  run_fit(tb, host_, /*epochs=*/1, /*steps=*/2, /*validate=*/false);
  const auto files = kolo::testing::event_files(dir_ + "/train");
  ASSERT_EQ(files.size(), 2u);
  std::vector<std::int64_t> steps;
  for (const auto& f : files) {
    for (const auto& [step, value] : kolo::testing::scalars(read_event_file(f), "batch_loss")) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps, (std::vector<std::int64_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace kolo::train
