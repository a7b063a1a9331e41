// Keras's built-in callbacks and Horovod's, with their options and defaults. Part of
// <kolo/train.h>. The progress bar is in progbar.h, TensorBoard in summary.h.
//
// "monitor" names a log entry ("val_loss", "accuracy", ...); mode "auto" picks max for
// names that contain "acc" or "auc" or start with "fmeasure", and min otherwise (one rule
// for every callback; docs/callbacks.md says where Keras's per-callback rules differ). A
// monitored value missing from the logs is a warning on the chief (Keras's), not an error.
// Options are checked at construction: a bad one (an unknown mode, factor >= 1, an empty
// filepath, ...) throws kolo::Error (kInvalidArgument). Messages are Keras's and
// Horovod's, on stdout, on the chief only.
//
// Not for: the hooks themselves (callback.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kolo/train/callback.h"

namespace kolo::train {

// Records every epoch's logs; fit() returns it (Keras's History).
class History : public Callback {
 public:
  // history["loss"][i]: the value at the i-th epoch run (epochs[i] is its number).
  std::map<std::string, std::vector<double>> history;
  std::vector<int> epochs;
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
};

struct ModelCheckpointOptions {
  // A template: {epoch} (1-based, as Keras), {epoch:02d}, {val_loss:.2f}, any log name
  // with a printf-style format. Required.
  std::string filepath{};
  std::string monitor = "val_loss";
  int verbose = 0;
  bool save_best_only = false;
  bool save_weights_only = false;
  std::string mode = "auto";  // "auto", "min" or "max"
  int save_freq = 0;          // 0: every epoch (Keras's "epoch"); N: every N batches
  std::optional<double> initial_value_threshold{};  // a "best" to beat from the start
};
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options);
  void on_train_begin(Logs& logs) override;
  void on_train_batch_end(int batch, Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  // The path written last ("" before any).
  const std::string& last_path() const { return last_path_; }

 private:
  // batch: -1 at an epoch end.
  void save(int epoch, int batch, const Logs& logs);
  ModelCheckpointOptions o_;
  bool greater_ = false;
  double best_ = 0;  // initial_value_threshold, else +-inf; kept across fits, as Keras
  int epoch_ = 0;
  std::int64_t batches_ = 0;  // since the last save
  std::string last_path_;
};

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0;
  int patience = 0;
  int verbose = 0;
  std::string mode = "auto";
  std::optional<double> baseline{};
  bool restore_best_weights = false;
  int start_from_epoch = 0;
};
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(Logs& logs) override;
  int stopped_epoch() const { return stopped_epoch_; }  // 0 when it did not stop
  int best_epoch() const { return best_epoch_; }

 private:
  bool is_improvement(double value, double reference) const;
  EarlyStoppingOptions o_;
  bool greater_ = false;
  int wait_ = 0;
  int stopped_epoch_ = 0;
  int best_epoch_ = 0;
  double best_ = 0;  // +-inf at train begin
  std::vector<std::pair<std::string, torch::Tensor>> best_weights_;
};

// lr = schedule(epoch, lr) at every epoch begin; logs["lr"] at epoch end.
class LearningRateScheduler : public Callback {
 public:
  explicit LearningRateScheduler(std::function<double(int epoch, double lr)> schedule,
                                 int verbose = 0);
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;

 private:
  std::function<double(int, double)> schedule_;
  int verbose_;
};

struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";
  double factor = 0.1;  // must be < 1
  int patience = 10;
  int verbose = 0;
  std::string mode = "auto";
  double min_delta = 1e-4;
  int cooldown = 0;
  double min_lr = 0;
};
class ReduceLROnPlateau : public Callback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions options = {});
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;

 private:
  ReduceLROnPlateauOptions o_;
  bool greater_ = false;
  double best_ = 0;  // +-inf at train begin
  int wait_ = 0;
  int cooldown_counter_ = 0;
};

// One row per epoch: "epoch" then the log names sorted; written by the chief, flushed
// per epoch.
class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::string filename, std::string separator = ",", bool append = false);
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(Logs& logs) override;

 private:
  struct FileCloser {
    void operator()(std::FILE* file) const;
  };
  std::string filename_, separator_;
  bool append_;
  bool header_written_ = false;
  std::vector<std::string> keys_;                // fixed by the first epoch's logs, as Keras
  std::unique_ptr<std::FILE, FileCloser> file_;  // open on the chief during fit
};

// Stops training at the first batch whose loss is NaN or infinite.
class TerminateOnNaN : public Callback {
 public:
  void on_train_batch_end(int batch, Logs& logs) override;
};

struct BackupAndRestoreOptions {
  std::string backup_dir{};       // required; the chief writes here
  int save_freq = 0;              // 0: at every epoch end (Keras's "epoch"); N: every N batches
  bool delete_checkpoint = true;  // remove the backup when training ends normally
};
// After a crash (or kill -9) the relaunched job resumes at the epoch it was in: the
// backup holds the weights, the optimizer state and the epoch (and batch) reached.
class BackupAndRestore : public Callback {
 public:
  explicit BackupAndRestore(BackupAndRestoreOptions options);
  void on_train_begin(Logs& logs) override;
  void on_train_batch_end(int batch, Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(Logs& logs) override;
  // The epoch training resumed at (-1: nothing was restored).
  int restored_epoch() const { return restored_epoch_; }

 private:
  std::string backup_path() const;    // <backup_dir>/backup.ckpt
  void backup(int epoch, int batch);  // batch -1: at the epoch's end
  BackupAndRestoreOptions o_;
  int epoch_ = 0;
  std::int64_t batches_ = 0;  // since the last batch-level backup
  int restored_epoch_ = -1;
};

struct LearningRateWarmupOptions {
  double initial_lr = 0;  // required: the learning rate reached after the warm-up
  int warmup_epochs = 5;
  bool momentum_correction = true;
  std::optional<std::int64_t> steps_per_epoch{};  // default: fit's steps
  int verbose = 0;
};
// Horovod's LearningRateWarmupCallback (Goyal et al. 2017): over warmup_epochs the
// learning rate rises from initial_lr / size to initial_lr, per batch:
//   lr = initial_lr / size * (epoch' * (size - 1) / warmup_epochs + 1),
// epoch' = epoch + (batch + 1) / steps_per_epoch; size = num_replicas_in_sync. With
// momentum_correction, the momentum is scaled by new_lr / old_lr for the batch that
// changes it.
class LearningRateWarmup : public Callback {
 public:
  explicit LearningRateWarmup(LearningRateWarmupOptions options);
  void on_train_begin(Logs& logs) override;
  void on_train_batch_begin(int batch, Logs& logs) override;
  void on_train_batch_end(int batch, Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;

 private:
  LearningRateWarmupOptions o_;
  int epoch_ = 0;
  std::int64_t steps_ = 0;  // per epoch: steps_per_epoch or fit's steps
  std::optional<double> restore_momentum_;
};

// Horovod's BroadcastGlobalVariablesCallback: after the first batch, every worker gets
// the chief's weights (and optimizer state). Under HorovodStrategy fit leaves it out,
// with a warning: the model already gave every worker the chief's weights.
class BroadcastGlobalVariables : public Callback {
 public:
  void on_train_batch_end(int batch, Logs& logs) override;

 private:
  bool done_ = false;
};

// Horovod's MetricAverageCallback: at each epoch end, every log value becomes its average
// over the workers (in name order). fit's Horovod strategy adds it first, and leaves out
// a copy in FitOptions::callbacks (with a warning).
class MetricAverage : public Callback {
 public:
  void on_epoch_end(int epoch, Logs& logs) override;
};

}  // namespace kolo::train
