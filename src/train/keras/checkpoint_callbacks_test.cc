// ModelCheckpoint and BackupAndRestore through a fake host whose save()/load() really
// write and read files: which files appear (names from the templates, only improvements
// with save_best_only, batch-level saving), Keras's messages, resuming at the right epoch
// from a backup (epoch- and batch-level), removal at the end, the chief's answer deciding
// whether there is a backup, and a backup writer killed with SIGKILL mid-save (a real
// process) leaving the previous backup usable.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kolo/error.h"
#include "kolo/train/callbacks.h"
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

std::function<EpochLogs(int)> series(const std::string& name, std::vector<double> values) {
  return [name, values](int epoch) {
    return EpochLogs{Logs{{"loss", 1.0 + epoch}, {name, values.at(epoch)}}, {}};
  };
}

auto weights_follow_epoch(FakeHost& host) {
  return [&host](int epoch, int) { host.set_weights_to(static_cast<float>(epoch)); };
}

class CheckpointCallbacks : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kolo_checkpoint_callbacks_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::set<std::string> files(const fs::path& dir) const {
    std::set<std::string> out;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (entry.is_regular_file()) out.insert(fs::relative(entry.path(), dir).string());
    }
    return out;
  }
  // The weight value stored in a checkpoint (all weights of the fake are one value).
  static float stored_weight(const std::string& file, bool weights_only) {
    FakeHost reader;
    reader.load(file, weights_only);
    return reader.weight_value();
  }
  fs::path dir_;
};

// --- ModelCheckpoint ----------------------------------------------------------------------

TEST_F(CheckpointCallbacks, SaveBestOnlyWritesImprovementsWithKerasMessages) {
  FakeHost host;
  ModelCheckpointOptions o;
  o.filepath = path("ckpt-{epoch:02d}-{val_loss:.2f}.pt");
  o.save_best_only = true;
  o.save_weights_only = true;
  o.verbose = 1;
  auto mc = std::make_shared<ModelCheckpoint>(o);
  ::testing::internal::CaptureStdout();
  drive_fit(host, {mc}, params_for(4), series("val_loss", {0.5, 0.6, 0.4, 0.4}),
            weights_follow_epoch(host));
  const std::string p1 = path("ckpt-01-0.50.pt"), p3 = path("ckpt-03-0.40.pt");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "\nEpoch 1: val_loss improved from inf to 0.50000, saving model to " + p1 +
                "\n"
                "\nEpoch 2: val_loss did not improve from 0.50000\n"
                "\nEpoch 3: val_loss improved from 0.50000 to 0.40000, saving model to " +
                p3 +
                "\n"
                "\nEpoch 4: val_loss did not improve from 0.40000\n");
  EXPECT_EQ(files(dir_), (std::set<std::string>{"ckpt-01-0.50.pt", "ckpt-03-0.40.pt"}));
  EXPECT_EQ(stored_weight(p1, true), 0.0f);
  EXPECT_EQ(stored_weight(p3, true), 2.0f);
  EXPECT_EQ(mc->last_path(), p3);
}

TEST_F(CheckpointCallbacks, EveryEpochWithTemplatesAndParentDirsOrEveryNBatches) {
  {  // EveryEpochWithTemplatesAndParentDirectories
    FakeHost host;
    ModelCheckpointOptions o;
    o.filepath = path("run/a/b/w.{epoch:03d}.{loss:.3f}-{val_accuracy}.ckpt");
    o.verbose = 1;
    auto mc = std::make_shared<ModelCheckpoint>(o);
    ::testing::internal::CaptureStdout();
    drive_fit(host, {mc}, params_for(2), series("val_accuracy", {0.5, 0.75}),
              weights_follow_epoch(host));
    const std::string p2 = path("run/a/b/w.002.2.000-0.75.ckpt");
    EXPECT_EQ(::testing::internal::GetCapturedStdout(), "\nEpoch 1: saving model to " +
                                                            path("run/a/b/w.001.1.000-0.5.ckpt") +
                                                            "\n"
                                                            "\nEpoch 2: saving model to " +
                                                            p2 + "\n");
    EXPECT_EQ(files(dir_), (std::set<std::string>{"run/a/b/w.001.1.000-0.5.ckpt",
                                                  "run/a/b/w.002.2.000-0.75.ckpt"}));
    EXPECT_EQ(stored_weight(p2, false), 1.0f);  // a whole-state save (weights_only false)
  }
  {  // SaveFreqInBatches
    FakeHost host;
    ModelCheckpointOptions o;
    o.filepath = path("batches/b-{epoch}-{batch}.pt");
    o.save_freq = 2;
    auto mc = std::make_shared<ModelCheckpoint>(o);
    // 3 batches per epoch, a save every 2 batches: after global batches 2, 4, 6.
    drive_fit(host, {mc}, params_for(2, 3), series("val_loss", {1, 1}));
    EXPECT_EQ(files(dir_ / "batches"), (std::set<std::string>{"b-1-2.pt", "b-2-1.pt", "b-2-3.pt"}));
  }
}

TEST_F(CheckpointCallbacks, AutoModeMaximisesAccuracyAndThresholdIsTheFirstBest) {
  FakeHost host;
  ModelCheckpointOptions o;
  o.filepath = path("acc-{epoch}.pt");
  o.monitor = "val_accuracy";
  o.save_best_only = true;
  o.initial_value_threshold = 0.55;
  o.verbose = 1;
  auto mc = std::make_shared<ModelCheckpoint>(o);
  ::testing::internal::CaptureStdout();
  drive_fit(host, {mc}, params_for(4), series("val_accuracy", {0.5, 0.6, 0.58, 0.7}));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(files(dir_), (std::set<std::string>{"acc-2.pt", "acc-4.pt"}));
  EXPECT_NE(out.find("\nEpoch 1: val_accuracy did not improve from 0.55000\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("\nEpoch 2: val_accuracy improved from 0.55000 to 0.60000"), std::string::npos)
      << out;
}

TEST_F(CheckpointCallbacks, MissingMonitorSkipsAndUnknownTemplateFieldIsAnError) {
  {  // MissingMonitorSkipsWithKerasWarning
    FakeHost host;
    ModelCheckpointOptions o;
    o.filepath = path("w.pt");
    o.save_best_only = true;
    auto mc = std::make_shared<ModelCheckpoint>(o);
    ::testing::internal::CaptureStderr();
    drive_fit(host, {mc}, params_for(1), series("accuracy", {1}));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("Can save best model only with val_loss available, skipping."),
              std::string::npos)
        << err;
    EXPECT_TRUE(files(dir_).empty());
  }
  {  // UnknownTemplateFieldIsAnError
    FakeHost host;
    ModelCheckpointOptions o;
    o.filepath = path("w-{val_los:.2f}.pt");
    auto mc = std::make_shared<ModelCheckpoint>(o);
    try {
      drive_fit(host, {mc}, params_for(1), series("val_loss", {1}));
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no value named \"val_los\" (known now: epoch, loss, "
                                           "val_loss)"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(ModelCheckpoint(ModelCheckpointOptions{}), Error);  // no filepath
  }
}

// --- BackupAndRestore ---------------------------------------------------------------------

struct Crash {};

// Runs `epochs` epochs of `steps` batches with a BackupAndRestore in `dir`; throws Crash
// (as a killed job would stop) before batch `crash_batch` of epoch `crash_epoch`.
std::vector<int> run_backed_up(FakeHost& host, BackupAndRestoreOptions o, int epochs, int steps,
                               int crash_epoch = -1, int crash_batch = 0, int* restored = nullptr) {
  auto br = std::make_shared<BackupAndRestore>(o);
  std::vector<int> ran;
  try {
    ran = drive_fit(host, {br}, params_for(epochs, steps),
                    series("val_loss", std::vector<double>(epochs, 1.0)),
                    [&](int epoch, int batch) {
                      if (epoch == crash_epoch && batch == crash_batch) throw Crash{};
                      host.set_weights_to(static_cast<float>(epoch));
                      host.lr = 0.01 * (epoch + 1);
                    })
              .epochs;
  } catch (const Crash&) {
  }
  if (restored) *restored = br->restored_epoch();
  return ran;
}

TEST_F(CheckpointCallbacks, BackupResumesAtTheInterruptedEpochAndIsRemovedAtTheEnd) {
  const BackupAndRestoreOptions o{path("backup"), 0, true};
  {
    FakeHost host;
    int restored = 0;
    run_backed_up(host, o, 5, 2, /*crash_epoch=*/3, 0, &restored);
    EXPECT_EQ(restored, -1);  // nothing to restore the first time
    EXPECT_TRUE(fs::exists(path("backup/backup.ckpt")));
  }
  FakeHost host;  // the relaunched job: fresh weights and rate
  int restored = 0;
  auto ran = run_backed_up(host, o, 5, 2, -1, 0, &restored);
  EXPECT_EQ(restored, 3);  // epochs 0..2 were backed up, 3 was interrupted
  EXPECT_EQ(host.resumed_at, 3);
  EXPECT_EQ(ran, (std::vector<int>{3, 4}));
  ASSERT_EQ(host.loads.size(), 1u);
  // Removed after the successful end, directory and all.
  EXPECT_FALSE(fs::exists(path("backup")));
}

TEST_F(CheckpointCallbacks, RestoredStateIsTheBackedUpEpochs) {
  const BackupAndRestoreOptions o{path("backup"), 0, false};
  FakeHost first;
  run_backed_up(first, o, 5, 2, /*crash_epoch=*/2, 1);
  // Restore only (one epoch of fit that has already run out): look at the loaded state.
  FakeHost host;
  auto br = std::make_shared<BackupAndRestore>(o);
  br->set_host(&host);
  br->set_params(params_for(5, 2));
  Logs logs;
  br->on_train_begin(logs);
  EXPECT_EQ(br->restored_epoch(), 2);
  EXPECT_EQ(host.weight_value(), 1.0f);  // epoch 1's weights
  EXPECT_DOUBLE_EQ(host.lr, 0.02);       // and its optimizer state (the fake keeps lr)
  br->on_train_end(logs);
  EXPECT_TRUE(fs::exists(path("backup/backup.ckpt")));  // delete_checkpoint false
}

TEST_F(CheckpointCallbacks, BatchLevelBackups) {
  // 4 batches per epoch, a backup every 4: each lands on an epoch's last batch, so the
  // relaunch starts at the next epoch.
  {
    const BackupAndRestoreOptions o{path("b4"), 4, true};
    FakeHost first, second;
    run_backed_up(first, o, 5, 4, /*crash_epoch=*/2, 1);
    int restored = 0;
    auto ran = run_backed_up(second, o, 5, 4, -1, 0, &restored);
    EXPECT_EQ(restored, 2);
    EXPECT_EQ(ran, (std::vector<int>{2, 3, 4}));
  }
  // A backup every 3: the last one before the crash (in epoch 1's last batch) was taken
  // inside epoch 1 (after global batch 6, epoch 1's second), so epoch 1 is redone.
  {
    const BackupAndRestoreOptions o{path("b3"), 3, true};
    FakeHost first, second;
    run_backed_up(first, o, 5, 4, /*crash_epoch=*/1, 3);
    int restored = 0;
    auto ran = run_backed_up(second, o, 5, 4, -1, 0, &restored);
    EXPECT_EQ(restored, 1);
    EXPECT_EQ(second.weight_value(), 4.0f);  // the final epoch's weights after the rerun
    EXPECT_EQ(ran, (std::vector<int>{1, 2, 3, 4}));
  }
}

TEST_F(CheckpointCallbacks, TheChiefDecidesWhetherThereIsABackup) {
  const BackupAndRestoreOptions o{path("backup"), 0, false};
  FakeHost chief;
  run_backed_up(chief, o, 4, 1, /*crash_epoch=*/2);
  // A non-chief worker: it has no say (contributes 0); the average says the chief has one.
  FakeHost worker;
  worker.chief = false;
  worker.workers = 2;
  worker.average = [](const std::vector<double>& v) {
    EXPECT_EQ(v, std::vector<double>{0.0});
    return std::vector<double>{0.5};
  };
  int restored = 0;
  run_backed_up(worker, o, 4, 1, -1, 0, &restored);
  EXPECT_EQ(restored, 2);
  EXPECT_EQ(worker.loads.size(), 1u);
  // The chief says there is none: nothing is loaded even though a file is at the path.
  FakeHost other;
  other.chief = false;
  other.workers = 2;
  other.average = [](const std::vector<double>&) { return std::vector<double>{0.0}; };
  run_backed_up(other, o, 4, 1, -1, 0, &restored);
  EXPECT_EQ(restored, -1);
  EXPECT_TRUE(other.loads.empty());
}

// Backs up 1 MiB of weights every epoch, forever; a thread of the same process sends it
// SIGKILL `delay_ms` after the first backup exists: somewhere in a later save (measured:
// in about one run of five with the temporary file half-written).
[[noreturn]] void back_up_until_killed(const std::string& dir, int delay_ms) {
  std::thread([dir, delay_ms] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!fs::exists(dir + "/backup.ckpt") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(::getpid(), SIGKILL);
  }).detach();
  FakeHost host;
  host.weights = {{"w", torch::zeros({1 << 18})}};
  auto br = std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{dir, 0, true});
  drive_fit(
      host, {br}, params_for(1 << 30, 1), [](int) { return EpochLogs{}; },
      [&](int epoch, int) { host.weights[0].second.fill_(static_cast<float>(epoch)); });
  std::_Exit(3);  // not reached: 2^30 epochs
}

// The backup directory of one kill test: made and put in the environment by the test,
// found there by the death test's child (a new process running the same test).
std::string kill_dir(int delay_ms) {
  if (const char* dir = std::getenv("KOLO_TEST_BACKUP_KILL_DIR")) return dir;
  const std::string dir =
      (fs::temp_directory_path() /
       ("kolo_backup_kill_" + std::to_string(::getpid()) + "_" + std::to_string(delay_ms)))
          .string();
  fs::remove_all(dir);
  ::setenv("KOLO_TEST_BACKUP_KILL_DIR", dir.c_str(), 1);
  return dir;
}

class BackupKill : public ::testing::TestWithParam<int> {};

TEST_P(BackupKill, PreviousBackupSurvivesKill9DuringSave) {
  // A real process: the death test re-executes this binary ("threadsafe" style, so
  // libtorch's threads are not forked) and runs back_up_until_killed there.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int delay_ms = GetParam();
  const std::string dir = kill_dir(delay_ms);
  EXPECT_EXIT(back_up_until_killed(dir, delay_ms), ::testing::KilledBySignal(SIGKILL), "");
  ::unsetenv("KOLO_TEST_BACKUP_KILL_DIR");
  ASSERT_TRUE(fs::exists(dir + "/backup.ckpt")) << "no backup within 20 s";

  FakeHost host;
  host.weights = {{"w", torch::full({1 << 18}, -1.0f)}};
  auto br = std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{dir, 0, true});
  br->set_host(&host);
  br->set_params(params_for(1 << 30, 1));
  Logs logs;
  br->on_train_begin(logs);  // throws if the backup were damaged
  const int restored = br->restored_epoch();
  EXPECT_GE(restored, 1);
  // Every element is the value of the epoch the backup says it holds.
  EXPECT_TRUE(host.weights[0].second.eq(static_cast<float>(restored - 1)).all().item<bool>())
      << "restored epoch " << restored;
  // The end of a successful fit removes the backup, a half-written temporary file and
  // the directory.
  br->on_train_end(logs);
  EXPECT_FALSE(fs::exists(dir));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(DelaysAfterFirstBackupMs, BackupKill, ::testing::Values(0, 15));

}  // namespace
}  // namespace kolo::train
