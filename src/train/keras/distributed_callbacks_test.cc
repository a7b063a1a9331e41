// The callbacks for distributed training, driven through a fake host in fit's hook order
// with chosen logs: Horovod's (LearningRateWarmup, BroadcastGlobalVariables, MetricAverage,
// and which of the user's copies Horovod's fit leaves out), and every built-in callback on a
// worker that is not the chief (the chief's decisions, nothing printed or written).
// Expected messages are Horovod's text; expected decisions follow Horovod's code for the
// same inputs.
//
// Not for: the callbacks' own decisions on one worker (callbacks_test.cc,
// checkpoint_callbacks_test.cc), or real workers (fit_test.cc, elastic_fit_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kolo/error.h"
#include "kolo/train/callbacks.h"
#include "train/keras/model_impl.h"
#include "train/strategies/extended.h"
#include "train/testing/callback_runs.h"
#include "train/testing/fake_host.h"

namespace kolo::train {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // NOLINT: test helpers

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
  EXPECT_EQ(count(make_callbacks(user, 0, horovod_extended().get(), true)), std::pair(1, 0));
  EXPECT_EQ(count(make_callbacks(user, 0, all_reduce_extended().get(), true)), std::pair(2, 1));
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
