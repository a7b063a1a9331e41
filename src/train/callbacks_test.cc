// The built-in callbacks that act on logs and learning rate (History, EarlyStopping,
// LearningRateScheduler, ReduceLROnPlateau, CSVLogger, TerminateOnNaN) and Horovod's
// (LearningRateWarmup, BroadcastGlobalVariables, MetricAverage), driven through a fake
// host in fit's hook order with chosen logs. Expected messages are Keras's and Horovod's
// text; expected decisions follow tf-keras's and Horovod's code for the same inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "kolo/error.h"
#include "kolo/train/callbacks.h"
#include "train/model_impl.h"
#include "train/testing/fake_host.h"

namespace kolo::train {
namespace {

namespace fs = std::filesystem;
using testing::drive_fit;
using testing::EpochLogs;
using testing::FakeHost;

TrainParams params_for(int epochs, std::int64_t steps = 2) {
  TrainParams p;
  p.epochs = epochs;
  p.steps = steps;
  return p;
}

// Each epoch's logs: `name` = values[epoch].
std::function<EpochLogs(int)> series(const std::string& name, std::vector<double> values) {
  return [name, values](int epoch) {
    return EpochLogs{Logs{{"loss", 1.0}, {name, values.at(epoch)}}, {}};
  };
}

// "Training" that leaves epoch e's weights all equal to e.
auto weights_follow_epoch(FakeHost& host) {
  return [&host](int epoch, int) { host.set_weights_to(static_cast<float>(epoch)); };
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kolo_callbacks_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// --- History ------------------------------------------------------------------------------

TEST(History, RecordsEveryEpochAndResetsPerFit) {
  FakeHost host;
  auto history = std::make_shared<History>();
  auto logs = [](int e) { return EpochLogs{Logs{{"loss", 1.0 / (e + 1)}, {"acc", 0.1 * e}}, {}}; };
  TrainParams p = params_for(3);
  p.initial_epoch = 1;
  drive_fit(host, {history}, p, logs);
  EXPECT_EQ(history->epochs, (std::vector<int>{1, 2}));
  EXPECT_EQ(history->history["loss"], (std::vector<double>{0.5, 1.0 / 3}));
  EXPECT_EQ(history->history["acc"], (std::vector<double>{0.1, 0.2}));
  drive_fit(host, {history}, params_for(1), logs);
  EXPECT_EQ(history->epochs, (std::vector<int>{0}));
  EXPECT_EQ(history->history["loss"], (std::vector<double>{1.0}));
}

// --- EarlyStopping ------------------------------------------------------------------------

TEST(EarlyStopping, Patience2StopsAndRestoresBestWeights) {
  FakeHost host;
  EarlyStoppingOptions o;
  o.patience = 2;
  o.restore_best_weights = true;
  o.verbose = 1;
  auto es = std::make_shared<EarlyStopping>(o);
  ::testing::internal::CaptureStdout();
  // Best at epoch 1; epochs 2 and 3 do not improve: the wait reaches 2 at epoch 3.
  auto run = drive_fit(host, {es}, params_for(10), series("val_loss", {1.0, 0.5, 0.6, 0.7, 0.1}),
                       weights_follow_epoch(host));
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "Epoch 4: early stopping\n"
            "Restoring model weights from the end of the best epoch: 2.\n");
  EXPECT_EQ(run.epochs, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(es->stopped_epoch(), 3);
  EXPECT_EQ(es->best_epoch(), 1);
  EXPECT_TRUE(host.stop);
  EXPECT_EQ(host.weight_value(), 1.0f);  // epoch 1's weights, not epoch 3's
  EXPECT_TRUE(host.weights[1].second.eq(1.0f).all().item<bool>());
}

TEST(EarlyStopping, RestoresBestWeightsEvenWithoutStoppingAndOnlyWhenAsked) {
  {  // RestoresBestWeightsEvenWithoutStopping
    FakeHost host;
    EarlyStoppingOptions o;
    o.patience = 5;
    o.restore_best_weights = true;
    o.verbose = 1;
    auto es = std::make_shared<EarlyStopping>(o);
    ::testing::internal::CaptureStdout();
    auto run = drive_fit(host, {es}, params_for(3), series("val_loss", {0.5, 0.4, 0.9}),
                         weights_follow_epoch(host));
    EXPECT_EQ(::testing::internal::GetCapturedStdout(),
              "Restoring model weights from the end of the best epoch: 2.\n");
    EXPECT_EQ(run.epochs.size(), 3u);
    EXPECT_EQ(es->stopped_epoch(), 0);
    EXPECT_EQ(host.weight_value(), 1.0f);
  }
  {  // WithoutRestoreKeepsLastWeightsAndIsSilentAtVerbose0
    FakeHost host;
    EarlyStoppingOptions o;
    o.patience = 1;
    auto es = std::make_shared<EarlyStopping>(o);
    ::testing::internal::CaptureStdout();
    auto run = drive_fit(host, {es}, params_for(5), series("val_loss", {0.5, 0.6, 0.4}),
                         weights_follow_epoch(host));
    EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
    EXPECT_EQ(run.epochs, (std::vector<int>{0, 1}));
    EXPECT_EQ(host.weight_value(), 1.0f);
    EXPECT_EQ(host.set_weights_calls, 0);
  }
}

TEST(EarlyStopping, BaselineKeepsTheWaitRunningUntilBeaten) {
  const std::vector<double> losses{0.9, 0.8, 0.85, 0.7, 0.6};
  auto run_with = [&](std::optional<double> baseline) {
    FakeHost host;
    EarlyStoppingOptions o;
    o.patience = 2;
    o.baseline = baseline;
    auto es = std::make_shared<EarlyStopping>(o);
    auto epochs = drive_fit(host, {es}, params_for(5), series("val_loss", losses)).epochs;
    return std::make_pair(epochs, es->stopped_epoch());
  };
  // Without a baseline each improvement restarts the wait: all 5 epochs run.
  EXPECT_EQ(run_with(std::nullopt).first.size(), 5u);
  // Baseline 0.5 is never beaten: the wait keeps counting through the improvements and
  // the first epoch that does not improve (2) ends training.
  auto [epochs, stopped] = run_with(0.5);
  EXPECT_EQ(epochs, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(stopped, 2);
  // A baseline the first epoch beats changes nothing.
  EXPECT_EQ(run_with(0.95).first.size(), 5u);
}

TEST(EarlyStopping, StartFromEpochIgnoresTheWarmUp) {
  const std::vector<double> worse{1, 2, 3, 4, 5, 6, 7};
  EarlyStoppingOptions o;
  o.patience = 1;
  {
    FakeHost host;
    auto es = std::make_shared<EarlyStopping>(o);
    EXPECT_EQ(drive_fit(host, {es}, params_for(7), series("val_loss", worse)).epochs.size(), 2u);
  }
  o.start_from_epoch = 3;
  FakeHost host;
  auto es = std::make_shared<EarlyStopping>(o);
  auto run = drive_fit(host, {es}, params_for(7), series("val_loss", worse));
  EXPECT_EQ(run.epochs, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(es->stopped_epoch(), 4);
  EXPECT_EQ(es->best_epoch(), 3);
}

TEST(EarlyStopping, AutoModeMaximisesValAccuracyAndMinDelta) {
  {  // AutoModeMaximisesValAccuracy
    EarlyStoppingOptions o;
    o.monitor = "val_accuracy";
    o.patience = 2;
    FakeHost host;
    auto es = std::make_shared<EarlyStopping>(o);
    // Max: best 0.6 at epoch 1, stop at epoch 3. (Min would stop at epoch 2.)
    auto run =
        drive_fit(host, {es}, params_for(10), series("val_accuracy", {0.5, 0.6, 0.55, 0.54}));
    EXPECT_EQ(run.epochs.size(), 4u);
    EXPECT_EQ(es->best_epoch(), 1);
    EXPECT_EQ(es->stopped_epoch(), 3);
  }
  {  // MinDeltaCountsSmallGainsAsNoImprovement
    EarlyStoppingOptions o;
    o.patience = 1;
    o.min_delta = 0.1;
    FakeHost host;
    auto es = std::make_shared<EarlyStopping>(o);
    auto run = drive_fit(host, {es}, params_for(10), series("val_loss", {1.0, 0.95, 0.5}));
    EXPECT_EQ(run.epochs.size(), 2u);  // 0.95 is within min_delta of 1.0
  }
  {  // UnknownModeIsAnError
    EarlyStoppingOptions o;
    o.mode = "minimum";
    EXPECT_THROW(EarlyStopping{o}, Error);
  }
}

TEST(EarlyStopping, MissingMonitorWarnsAndNeverStops) {
  EarlyStoppingOptions o;
  o.patience = 0;
  FakeHost host;
  auto es = std::make_shared<EarlyStopping>(o);
  ::testing::internal::CaptureStderr();
  auto run = drive_fit(host, {es}, params_for(3), [](int) {
    return EpochLogs{Logs{{"loss", 1}}, {}};
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(run.epochs.size(), 3u);
  EXPECT_NE(err.find("Early stopping conditioned on metric `val_loss` which is not available. "
                     "Available metrics are: loss"),
            std::string::npos)
      << err;
}

// --- LearningRateScheduler ----------------------------------------------------------------

TEST(LearningRateScheduler, SetsTheRateEachEpochLogsItAndRefusesNaN) {
  {  // SetsTheRateEachEpochAndLogsIt
    FakeHost host;
    host.lr = 0.1;
    auto sched = std::make_shared<LearningRateScheduler>(
        [](int epoch, double lr) { return epoch < 1 ? lr : lr * 0.5; }, 1);
    std::vector<double> lr_in_epoch;
    ::testing::internal::CaptureStdout();
    drive_fit(host, {sched}, params_for(3), series("val_loss", {1, 1, 1}), [&](int, int batch) {
      if (batch == 0) lr_in_epoch.push_back(host.lr);
    });
    EXPECT_EQ(::testing::internal::GetCapturedStdout(),
              "\nEpoch 1: LearningRateScheduler setting learning rate to 0.1.\n"
              "\nEpoch 2: LearningRateScheduler setting learning rate to 0.05.\n"
              "\nEpoch 3: LearningRateScheduler setting learning rate to 0.025.\n");
    EXPECT_EQ(lr_in_epoch, (std::vector<double>{0.1, 0.05, 0.025}));
    Logs logs;
    sched->on_epoch_end(2, logs);
    EXPECT_EQ(logs.get("lr"), 0.025);
  }
  {  // NonFiniteRateIsAnError
    FakeHost host;
    auto sched = std::make_shared<LearningRateScheduler>([](int, double) { return NAN; });
    try {
      drive_fit(host, {sched}, params_for(1), series("val_loss", {1}));
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(),
                   "LearningRateScheduler: schedule(epoch 0, lr 0.1) returned nan; it must return "
                   "a finite learning rate >= 0");
    }
  }
}

// --- ReduceLROnPlateau --------------------------------------------------------------------

// The learning rate each epoch ran with (logs["lr"]) and the rate after the last epoch.
std::pair<std::vector<double>, double> plateau_run(ReduceLROnPlateauOptions o, int epochs,
                                                   std::string* out = nullptr) {
  FakeHost host;
  host.lr = 1.0;
  auto cb = std::make_shared<ReduceLROnPlateau>(o);
  std::vector<double> lrs;
  auto logs = [&](int) { return EpochLogs{Logs{{"val_loss", 1.0}}, {}}; };
  auto recorder = std::make_shared<History>();
  if (out) ::testing::internal::CaptureStdout();
  drive_fit(host, {cb, recorder}, params_for(epochs), logs);
  if (out) *out = ::testing::internal::GetCapturedStdout();
  return {recorder->history["lr"], host.lr};
}

TEST(ReduceLROnPlateau, ReducesAfterPatienceEpochs) {
  ReduceLROnPlateauOptions o;
  o.patience = 2;
  o.factor = 0.5;
  o.verbose = 1;
  std::string out;
  auto [lrs, last] = plateau_run(o, 6, &out);
  // Epoch 0 sets the best; 1 and 2 do not improve: reduce at the end of epoch 2; again
  // at the end of epoch 4.
  EXPECT_EQ(lrs, (std::vector<double>{1, 1, 1, 0.5, 0.5, 0.25}));
  EXPECT_EQ(last, 0.25);
  EXPECT_EQ(out,
            "\nEpoch 3: ReduceLROnPlateau reducing learning rate to 0.5.\n"
            "\nEpoch 5: ReduceLROnPlateau reducing learning rate to 0.25.\n");
}

TEST(ReduceLROnPlateau, CooldownDelaysTheNextReductionAndNeverBelowMinLr) {
  {  // CooldownDelaysTheNextReduction
    ReduceLROnPlateauOptions o;
    o.patience = 2;
    o.factor = 0.5;
    o.cooldown = 2;
    auto [lrs, last] = plateau_run(o, 7);
    // Reduced at epoch 2; epochs 3 and 4 are the cooldown (4 already counts towards the
    // patience: Keras decrements the counter first), so the next reduction is at epoch 5.
    EXPECT_EQ(lrs, (std::vector<double>{1, 1, 1, 0.5, 0.5, 0.5, 0.25}));
    EXPECT_EQ(last, 0.25);
  }
  {  // NeverBelowMinLr
    ReduceLROnPlateauOptions o;
    o.patience = 1;
    o.factor = 0.5;
    o.min_lr = 0.3;
    auto [lrs, last] = plateau_run(o, 6);
    EXPECT_EQ(lrs, (std::vector<double>{1, 1, 0.5, 0.3, 0.3, 0.3}));
    EXPECT_EQ(last, 0.3);
  }
}

TEST(ReduceLROnPlateau, ImprovementResetsTheWaitAndFactorOneIsRefused) {
  {  // ImprovementResetsTheWait
    FakeHost host;
    host.lr = 1.0;
    ReduceLROnPlateauOptions o;
    o.patience = 2;
    o.min_delta = 0.01;
    auto cb = std::make_shared<ReduceLROnPlateau>(o);
    // 0.995 is within min_delta of 1.0 (no improvement); 0.9 improves.
    drive_fit(host, {cb}, params_for(4), series("val_loss", {1.0, 0.995, 0.9, 0.95}));
    EXPECT_EQ(host.lr, 1.0);
    drive_fit(host, {cb}, params_for(3), series("val_loss", {1.0, 0.995, 0.999}));
    EXPECT_DOUBLE_EQ(host.lr, 0.1);
  }
  {  // FactorOfOneIsRefusedWithKerasMessage
    ReduceLROnPlateauOptions o;
    o.factor = 1.0;
    try {
      ReduceLROnPlateau cb(o);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "ReduceLROnPlateau does not support a factor >= 1.0. Got 1.0");
    }
  }
}

// --- CSVLogger ----------------------------------------------------------------------------

using CSVLoggerTest = TempDir;

TEST_F(CSVLoggerTest, WritesKerasFile) {
  FakeHost host;
  const std::string file = path("log.csv");
  auto csv = std::make_shared<CSVLogger>(file);
  auto logs = [](int e) {
    return EpochLogs{Logs{{"loss", 0.5 / (e + 1)}, {"accuracy", 0.25 * (e + 1)}}, {}};
  };
  drive_fit(host, {csv}, params_for(2), logs);
  // Sorted names; with no validation in the first epoch, "val_" columns filled with NA.
  EXPECT_EQ(read_file(file),
            "epoch,accuracy,loss,val_accuracy,val_loss\r\n"
            "0,0.25,0.5,NA,NA\r\n"
            "1,0.5,0.25,NA,NA\r\n");
}

TEST_F(CSVLoggerTest, ValidationColumnsMissingValuesAndAppend) {
  {  // ValidationColumnsMissingValuesAndAppend
    FakeHost host;
    const std::string file = path("log.csv");
    // Validation only in epoch 0 and 2 (validation_freq 2): NA in epoch 1.
    auto logs = [](int e) {
      Logs l{{"loss", 1.0 + e}};
      if (e % 2 == 0) l.set("val_loss", 2.0 + e);
      return EpochLogs{l, {}};
    };
    drive_fit(host, {std::make_shared<CSVLogger>(file, ";")}, params_for(3), logs);
    const std::string first =
        "epoch;loss;val_loss\r\n"
        "0;1.0;2.0\r\n"
        "1;2.0;NA\r\n"
        "2;3.0;4.0\r\n";
    EXPECT_EQ(read_file(file), first);
    // append: the header is not repeated; the next fit's rows follow.
    TrainParams p = params_for(4);
    p.initial_epoch = 3;
    drive_fit(host, {std::make_shared<CSVLogger>(file, ";", true)}, p, logs);
    EXPECT_EQ(read_file(file), first + "3;4.0;NA\r\n");
    // Without append the file starts over.
    drive_fit(host, {std::make_shared<CSVLogger>(file, ";")}, params_for(1), logs);
    EXPECT_EQ(read_file(file), "epoch;loss;val_loss\r\n0;1.0;2.0\r\n");
  }
  {  // AppendToAMissingFileWritesTheHeader
    FakeHost host;
    const std::string file = path("new.csv");
    drive_fit(host, {std::make_shared<CSVLogger>(file, ",", true)}, params_for(1),
              series("val_loss", {0.125}));
    EXPECT_EQ(read_file(file), "epoch,loss,val_loss\r\n0,1.0,0.125\r\n");
  }
}

TEST_F(CSVLoggerTest, UnopenableFileNamesIt) {
  FakeHost host;
  auto csv = std::make_shared<CSVLogger>(path("no/such/dir/log.csv"));
  try {
    drive_fit(host, {csv}, params_for(1), series("val_loss", {1}));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CSVLogger: cannot open " + path("no/such/dir/log.csv") +
                                         " for writing: No such file or directory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(CSVLogger("x.csv", ", "), Error);
}

// --- TerminateOnNaN -----------------------------------------------------------------------

TEST(TerminateOnNaN, StopsAtTheFirstInvalidBatchLoss) {
  for (double bad : {NAN, INFINITY}) {
    FakeHost host;
    auto cb = std::make_shared<TerminateOnNaN>();
    int batches = 0;
    auto logs = [bad](int) {
      return EpochLogs{Logs{{"loss", 1.0}},
                       {Logs{{"loss", 0.5}}, Logs{{"loss", bad}}, Logs{{"loss", 0.25}}}};
    };
    ::testing::internal::CaptureStdout();
    auto run = drive_fit(host, {cb}, params_for(3, 3), logs, [&](int, int) { ++batches; });
    EXPECT_EQ(::testing::internal::GetCapturedStdout(),
              "Batch 1: Invalid loss, terminating training\n");
    EXPECT_EQ(batches, 2);
    EXPECT_EQ(run.epochs, (std::vector<int>{0}));
    EXPECT_TRUE(host.stop);
  }
}

// --- LearningRateWarmup -------------------------------------------------------------------

TEST(LearningRateWarmup, RateFollowsHorovodFormulaWithMomentumCorrection) {
  FakeHost host;
  host.replicas = 4;
  host.lr = 0.1;
  host.momentum_value = 0.9;
  LearningRateWarmupOptions o;
  o.initial_lr = 0.4;
  o.warmup_epochs = 2;
  o.verbose = 1;
  auto warmup = std::make_shared<LearningRateWarmup>(o);
  auto recorder = std::make_shared<History>();
  const int steps = 5;
  double previous_lr = host.lr;
  int checked = 0;
  ::testing::internal::CaptureStdout();
  drive_fit(host, {warmup, recorder}, params_for(3, steps), series("val_loss", {1, 1, 1}),
            [&](int epoch, int batch) {
              // Inside the batch (after on_train_batch_begin), as the optimizer step sees it.
              if (epoch < 2) {
                const double e = epoch + (batch + 1.0) / steps;
                const double expected = 0.4 / 4 * (e * 3 / 2 + 1);
                EXPECT_NEAR(host.lr, expected, 1e-15) << epoch << " " << batch;
                EXPECT_NEAR(*host.momentum_value, 0.9 * expected / previous_lr, 1e-15);
                ++checked;
              } else {
                EXPECT_DOUBLE_EQ(host.lr, 0.4);  // after the warm-up: left alone
                EXPECT_EQ(*host.momentum_value, 0.9);
              }
              previous_lr = host.lr;
            });
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "\nEpoch 2: finished gradual learning rate warmup to 0.4.\n");
  EXPECT_EQ(checked, 2 * steps);
  EXPECT_EQ(*host.momentum_value, 0.9);  // restored after every batch
  ASSERT_EQ(recorder->history["lr"].size(), 3u);
  EXPECT_DOUBLE_EQ(recorder->history["lr"][0], 0.1 * (1 * 3.0 / 2 + 1));  // 0.25
  EXPECT_DOUBLE_EQ(recorder->history["lr"][1], 0.4);
  EXPECT_EQ(host.lr_sets.size(), 2u * steps);
}

TEST(LearningRateWarmup, WithoutMomentumOnlyTheRateAndUnknownStepsIsAnError) {
  {  // WithoutMomentumOrCorrectionTouchesOnlyTheRate
    for (bool has_momentum : {false, true}) {
      FakeHost host;
      host.replicas = 2;
      if (has_momentum) host.momentum_value = 0.9;
      LearningRateWarmupOptions o;
      o.initial_lr = 1.0;
      o.warmup_epochs = 1;
      o.momentum_correction = !has_momentum;
      o.steps_per_epoch = 4;  // wins over fit's steps
      auto warmup = std::make_shared<LearningRateWarmup>(o);
      std::vector<double> lrs;
      drive_fit(host, {warmup}, params_for(1, 2), series("val_loss", {1}),
                [&](int, int) { lrs.push_back(host.lr); });
      EXPECT_EQ(lrs, (std::vector<double>{0.5 * (0.25 + 1), 0.5 * (0.5 + 1)}));
      EXPECT_TRUE(host.momentum_sets.empty());
    }
  }
  {  // UnknownStepsIsAnError
    FakeHost host;
    LearningRateWarmupOptions o;
    o.initial_lr = 1.0;
    auto warmup = std::make_shared<LearningRateWarmup>(o);
    try {
      drive_fit(host, {warmup}, params_for(1, -1), series("val_loss", {1}));
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(),
                   "LearningRateWarmup: the number of steps per epoch is unknown (fit's steps is "
                   "-1); pass steps_per_epoch to LearningRateWarmupOptions or fit");
    }
    EXPECT_THROW(LearningRateWarmup(LearningRateWarmupOptions{}), Error);  // no initial_lr
  }
}

// --- BroadcastGlobalVariables, MetricAverage ----------------------------------------------

TEST(BroadcastGlobalVariables, OnceAfterTheFirstBatch) {
  FakeHost host;
  auto cb = std::make_shared<BroadcastGlobalVariables>();
  int broadcasts_before_second_batch = -1;
  drive_fit(host, {cb}, params_for(2, 3), series("val_loss", {1, 1}), [&](int e, int b) {
    if (e == 0 && b == 0) {
      EXPECT_EQ(host.broadcasts, 0);
    }
    if (e == 0 && b == 1) broadcasts_before_second_batch = host.broadcasts;
  });
  EXPECT_EQ(broadcasts_before_second_batch, 1);
  EXPECT_EQ(host.broadcasts, 1);
}

// Horovod's own callback list under the Horovod strategy: fit has done their work, so
// the user's copies are left out (a second MetricAverage averaged the averages' cost
// again, a second broadcast cost one more); under other strategies they stay.
TEST(MetricAverage, HorovodFitLeavesOutTheUsersCopies) {
  const std::vector<CallbackPtr> user{std::make_shared<BroadcastGlobalVariables>(),
                                      std::make_shared<MetricAverage>(),
                                      std::make_shared<MetricAverage>()};
  const auto count = [](const CallbackList& list) {
    int averages = 0, broadcasts = 0;
    for (const auto& c : list.all) {
      averages += dynamic_cast<MetricAverage*>(c.get()) != nullptr ? 1 : 0;
      broadcasts += dynamic_cast<BroadcastGlobalVariables*>(c.get()) != nullptr ? 1 : 0;
    }
    return std::pair{averages, broadcasts};
  };
  EXPECT_EQ(count(make_callbacks(user, 0, /*horovod=*/true, true)), std::pair(1, 0));
  EXPECT_EQ(count(make_callbacks(user, 0, /*horovod=*/false, true)), std::pair(2, 1));
}

TEST(MetricAverage, AveragesInNameOrderInPlace) {
  FakeHost host;
  host.workers = 2;
  // The "other worker" had 1.0 for every value.
  host.average = [](const std::vector<double>& v) {
    std::vector<double> out;
    for (double x : v) out.push_back((x + 1.0) / 2);
    return out;
  };
  auto cb = std::make_shared<MetricAverage>();
  cb->set_host(&host);
  Logs logs{{"val_loss", 3.0}, {"loss", 2.0}, {"accuracy", 0.5}};
  cb->on_epoch_end(0, logs);
  ASSERT_EQ(host.averaged.size(), 1u);
  EXPECT_EQ(host.averaged[0], (std::vector<double>{0.5, 2.0, 3.0}));  // accuracy, loss, val_loss
  EXPECT_EQ(logs, (Logs{{"val_loss", 2.0}, {"loss", 1.5}, {"accuracy", 0.75}}));
}

// --- A worker that is not the chief -------------------------------------------------------

using NonChief = TempDir;

TEST_F(NonChief, DecidesAsTheChiefButPrintsAndWritesNothing) {
  auto run_as = [&](bool chief, const fs::path& dir) {
    FakeHost host;
    host.chief = chief;
    host.momentum_value = 0.9;
    EarlyStoppingOptions es;
    es.patience = 1;
    es.verbose = 1;
    es.restore_best_weights = true;
    ReduceLROnPlateauOptions rl;
    rl.patience = 1;
    rl.verbose = 1;
    ModelCheckpointOptions mc;
    mc.filepath = (dir / "ckpt" / "w-{epoch:02d}.pt").string();
    mc.verbose = 1;
    LearningRateWarmupOptions wu;
    wu.initial_lr = 0.2;
    wu.warmup_epochs = 1;
    wu.verbose = 1;
    std::vector<CallbackPtr> cbs{
        std::make_shared<EarlyStopping>(es),
        std::make_shared<ReduceLROnPlateau>(rl),
        std::make_shared<ModelCheckpoint>(mc),
        std::make_shared<CSVLogger>((dir / "log.csv").string()),
        std::make_shared<TerminateOnNaN>(),
        std::make_shared<LearningRateWarmup>(wu),
        std::make_shared<LearningRateScheduler>([](int, double lr) { return lr; }, 1),
        std::make_shared<BackupAndRestore>(
            BackupAndRestoreOptions{(dir / "backup").string(), 0, false}),
    };
    auto logs = [](int e) {
      return EpochLogs{Logs{{"loss", 1.0}, {"val_loss", e == 0 ? 0.5 : 0.75}},
                       {Logs{{"loss", 1.0}}, Logs{{"loss", e == 1 ? NAN : 1.0}}}};
    };
    ::testing::internal::CaptureStdout();
    auto run = drive_fit(host, cbs, params_for(4), logs, weights_follow_epoch(host));
    const std::string out = ::testing::internal::GetCapturedStdout();
    return std::make_tuple(out, run.epochs, host.lr, host.weight_value(), host.saves);
  };
  const fs::path chief_dir = dir_ / "chief", worker_dir = dir_ / "worker";
  fs::create_directories(chief_dir);
  fs::create_directories(worker_dir);
  auto [chief_out, chief_epochs, chief_lr, chief_w, chief_saves] = run_as(true, chief_dir);
  auto [out, epochs, lr, w, saves] = run_as(false, worker_dir);
  EXPECT_NE(chief_out, "");
  EXPECT_NE(chief_out.find("Batch 1: Invalid loss, terminating training"), std::string::npos);
  EXPECT_TRUE(fs::exists(chief_dir / "log.csv"));
  EXPECT_TRUE(fs::exists(chief_dir / "ckpt" / "w-01.pt"));
  EXPECT_EQ(out, "");
  EXPECT_TRUE(fs::is_empty(worker_dir)) << *fs::directory_iterator(worker_dir);
  // The same decisions: epochs run, learning rate, restored weights, save() calls (which
  // the host turns into no-ops off the chief).
  EXPECT_EQ(epochs, chief_epochs);
  EXPECT_EQ(lr, chief_lr);
  EXPECT_EQ(w, chief_w);
  EXPECT_EQ(saves.size(), chief_saves.size());
}

}  // namespace
}  // namespace kolo::train
