// The built-in callbacks that act on logs and learning rate (History, EarlyStopping,
// LearningRateScheduler, ReduceLROnPlateau, CSVLogger, TerminateOnNaN), driven through a
// fake host in fit's hook order with chosen logs. Expected messages are Keras's text;
// expected decisions follow tf-keras's code for the same inputs.
//
// Not for: Horovod's callbacks or a worker that is not the chief
// (distributed_callbacks_test.cc); ModelCheckpoint and BackupAndRestore
// (checkpoint_callbacks_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kolo/error.h"
#include "kolo/train/callbacks.h"
#include "train/testing/callback_runs.h"
#include "train/testing/fake_host.h"

namespace kolo::train {
namespace {

using namespace testing;  // NOLINT: test helpers

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

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

}  // namespace
}  // namespace kolo::train
