// Keras's callbacks that write checkpoints: ModelCheckpoint (weights or the whole training
// state at epoch ends or every N batches, optionally only on improvement) and
// BackupAndRestore (one backup overwritten as training goes, read back when a relaunched
// job starts, removed when training ends). Keras's rules and messages (callbacks.h;
// docs/callbacks.md).
//
// Files go through TrainingHost::save/load, which write atomically on the chief only and
// hand what the chief reads to every worker; this file decides what, where and when.
//
// Not for: the checkpoint file format (src/torch/checkpoint.cc), the other callbacks.
#include <filesystem>
#include <system_error>

#include "common/logging.h"
#include "kolo/error.h"
#include "kolo/train/callbacks.h"
#include "train/keras/callback_util.h"

namespace kolo::train {

namespace fs = std::filesystem;
using internal::chief_print;
using internal::strprintf;

namespace {

// Creates the directories above `path` (on the chief: the only writer).
void make_parent_dirs(const char* who, const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) {
    throw Error(ErrorCode::kInvalidArgument, std::string(who) + ": cannot create the directory " +
                                                 parent.string() + " for " + path + ": " +
                                                 ec.message());
  }
}

}  // namespace

// --- ModelCheckpoint ----------------------------------------------------------------------

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : o_(std::move(options)) {
  if (o_.filepath.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "ModelCheckpoint: filepath is required");
  }
  if (o_.save_freq < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "ModelCheckpoint: save_freq must be 0 (every epoch) or a number of batches > 0, "
                "got " +
                    std::to_string(o_.save_freq));
  }
  greater_ = internal::monitor_greater("ModelCheckpoint", o_.mode, o_.monitor);
  best_ = o_.initial_value_threshold.value_or(greater_ ? -INFINITY : INFINITY);
}

void ModelCheckpoint::on_train_begin(Logs& /*logs*/) { batches_ = 0; }

void ModelCheckpoint::on_epoch_begin(int epoch, Logs& /*logs*/) { epoch_ = epoch; }

void ModelCheckpoint::on_train_batch_end(int batch, Logs& logs) {
  if (o_.save_freq == 0) return;
  if (++batches_ < o_.save_freq) return;
  batches_ = 0;
  save(epoch_, batch, logs);
}

void ModelCheckpoint::on_epoch_end(int epoch, Logs& logs) {
  if (o_.save_freq == 0) save(epoch, -1, logs);
}

void ModelCheckpoint::save(int epoch, int batch, const Logs& logs) {
  // As Keras: "epoch" (1-based) and, for batch-level saving, "batch" (1-based) unless the
  // logs have their own "batch"; then every log entry.
  std::vector<internal::TemplateField> fields;
  fields.push_back({"epoch", static_cast<double>(epoch + 1), true});
  if (batch >= 0 && !logs.contains("batch")) {
    fields.push_back({"batch", static_cast<double>(batch + 1), true});
  }
  for (const auto& [name, value] : logs) {
    if (name != "epoch") fields.push_back({name, value, false});
  }
  const std::string path = internal::format_template("ModelCheckpoint", o_.filepath, fields);
  const std::string prefix = "\nEpoch " + std::to_string(epoch + 1) + ": ";
  const bool verbose = o_.verbose > 0;
  if (o_.save_best_only) {
    const std::optional<double> current = logs.get(o_.monitor);
    if (!current) {
      if (host().is_chief()) {
        KOLO_LOG(kWarning, "train")
            << "Can save best model only with " << o_.monitor << " available, skipping.";
      }
      return;
    }
    const bool improved = greater_ ? *current > best_ : *current < best_;
    if (!improved) {
      if (verbose) {
        chief_print(host(),
                    prefix + strprintf("%s did not improve from %.5f", o_.monitor.c_str(), best_));
      }
      return;
    }
    if (verbose) {
      chief_print(host(), prefix + strprintf("%s improved from %.5f to %.5f, saving model to %s",
                                             o_.monitor.c_str(), best_, *current, path.c_str()));
    }
    best_ = *current;
  } else if (verbose) {
    chief_print(host(), prefix + "saving model to " + path);
  }
  if (host().is_chief()) make_parent_dirs("ModelCheckpoint", path);
  host().save(path, o_.save_weights_only);
  last_path_ = path;
}

// --- BackupAndRestore ---------------------------------------------------------------------

BackupAndRestore::BackupAndRestore(BackupAndRestoreOptions options) : o_(std::move(options)) {
  if (o_.backup_dir.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "BackupAndRestore: backup_dir is required");
  }
  if (o_.save_freq < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "BackupAndRestore: save_freq must be 0 (every epoch) or a number of batches > 0, "
                "got " +
                    std::to_string(o_.save_freq));
  }
}

std::string BackupAndRestore::backup_path() const {
  return (fs::path(o_.backup_dir) / "backup.ckpt").string();
}

void BackupAndRestore::on_train_begin(Logs& /*logs*/) {
  batches_ = 0;
  epoch_ = 0;
  restored_epoch_ = -1;
  const std::string path = backup_path();
  // Only the chief's disk counts (it is the one that reads); every worker must take the
  // same branch, because load() is collective. With several workers the chief's answer
  // reaches the others through one average (the others contribute 0).
  bool exists = false;
  if (host().is_chief()) {
    std::error_code ec;
    fs::create_directories(o_.backup_dir, ec);
    if (ec) {
      throw Error(ErrorCode::kInvalidArgument, "BackupAndRestore: cannot create backup_dir " +
                                                   o_.backup_dir + ": " + ec.message());
    }
    exists = fs::exists(path, ec);
  }
  if (host().num_workers() > 1) {
    exists = host().average_over_workers({exists ? 1.0 : 0.0}).at(0) > 0;
  }
  if (!exists) return;
  const std::vector<std::pair<std::string, double>> extra = host().load(path, false);
  std::optional<double> epoch, batch;
  for (const auto& [name, value] : extra) {
    if (name == "epoch") epoch = value;
    if (name == "batch") batch = value;
  }
  if (!epoch) {
    throw Error(ErrorCode::kInvalidArgument,
                "BackupAndRestore: " + path +
                    " holds no epoch: it was not written by BackupAndRestore; remove it (or "
                    "choose another backup_dir) to start over");
  }
  // An epoch-end backup (batch -1) or one taken at an epoch's last batch resumes at the
  // next epoch; one from inside an epoch redoes that epoch from its start (fit resumes
  // at epoch granularity), with the weights of the backup.
  const int saved_epoch = static_cast<int>(*epoch);
  const std::int64_t saved_batch = batch ? static_cast<std::int64_t>(*batch) : -1;
  const bool epoch_done =
      saved_batch < 0 || (params().steps > 0 && saved_batch == params().steps - 1);
  restored_epoch_ = epoch_done ? saved_epoch + 1 : saved_epoch;
  host().resume_at_epoch(restored_epoch_);
  if (host().is_chief()) {
    KOLO_LOG(kInfo, "train") << "BackupAndRestore: restored " << path << " (epoch "
                             << saved_epoch + 1 << (saved_batch >= 0 ? ", batch " : "")
                             << (saved_batch >= 0 ? std::to_string(saved_batch + 1) : "")
                             << "); training resumes at epoch " << restored_epoch_ + 1;
  }
}

void BackupAndRestore::on_epoch_begin(int epoch, Logs& /*logs*/) { epoch_ = epoch; }

void BackupAndRestore::on_train_batch_end(int batch, Logs& /*logs*/) {
  if (o_.save_freq == 0) return;
  if (++batches_ < o_.save_freq) return;
  batches_ = 0;
  backup(epoch_, batch);
}

void BackupAndRestore::on_epoch_end(int epoch, Logs& /*logs*/) {
  if (o_.save_freq == 0) backup(epoch, -1);
}

void BackupAndRestore::backup(int epoch, int batch) {
  host().save(backup_path(), false,
              {{"epoch", static_cast<double>(epoch)}, {"batch", static_cast<double>(batch)}});
}

void BackupAndRestore::on_train_end(Logs& /*logs*/) {
  if (!o_.delete_checkpoint || !host().is_chief()) return;
  // The backup, a temporary file a killed save may have left, and the directory if that
  // leaves it empty (it is BackupAndRestore's own; Keras removes it too).
  const std::string path = backup_path();
  std::error_code ec;
  fs::remove(path, ec);
  fs::remove(path + ".tmp", ec);
  if (fs::is_empty(o_.backup_dir, ec) && !ec) fs::remove(o_.backup_dir, ec);
}

}  // namespace kolo::train
