// Checkpoints for custom training loops, as TensorFlow's tf.train.Checkpoint,
// tf.train.CheckpointManager and tf.train.latest_checkpoint. Part of <kolo/train.h>.
//
//   kolo::train::Checkpoint ckpt;
//   ckpt.track("model", model).track("optimizer", optimizer).track("step", step);
//   kolo::train::CheckpointManager manager(ckpt, "/tmp/ckpts", /*max_to_keep=*/3);
//   if (auto last = manager.latest_checkpoint()) ckpt.restore(*last);
//   ... train ...; manager.save();  // /tmp/ckpts/ckpt-1, ckpt-2, ... (the last 3 kept)
//
// A checkpoint is one file: modules' parameters and buffers, optimizers' state and
// tensors by the names they were tracked under, and the save counter, in kolo's framed
// libtorch archive (kolo::save_archive: a checksum, written whole or not at all). The
// directory's "checkpoint" file names the latest and the kept ones, in TensorFlow's text
// form (model_checkpoint_path: "ckpt-3"). In a job of several workers only the chief
// (kolo rank 0) writes; every worker counts saves alike and restore() reads the file on
// every worker (a file system they share, as TensorFlow's multi-worker checkpoints need).
//
// Not for: Model's own save/load and fit's callbacks (ModelCheckpoint, BackupAndRestore:
// callbacks.h), parameter-server checkpoints (ParameterServerStrategy::save_checkpoint).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace kolo::train {

class Checkpoint {
 public:
  // What the checkpoint holds, by name (unique; tracked objects must outlive it): a
  // module's parameters and buffers, an optimizer's state, a tensor (a step counter, an
  // EMA; restored in place, so it keeps its storage).
  Checkpoint& track(const std::string& name, std::shared_ptr<torch::nn::Module> module);
  template <typename Holder>
  Checkpoint& track(const std::string& name, const torch::nn::ModuleHolder<Holder>& module) {
    return track(name, std::static_pointer_cast<torch::nn::Module>(module.ptr()));
  }
  Checkpoint& track(const std::string& name, torch::optim::Optimizer& optimizer);
  Checkpoint& track(const std::string& name, torch::Tensor tensor);

  // tf.train.Checkpoint.save: the save counter goes up by one and the checkpoint is written
  // to `file_prefix`-<counter>; the directory's "checkpoint" file then names it as the
  // latest. Returns the path. kolo::Error naming the path when it cannot be written.
  std::string save(const std::string& file_prefix);
  // tf.train.Checkpoint.write: to exactly `path` (its directory created when missing), the
  // counter unchanged, no "checkpoint" file. Returns the path.
  std::string write(const std::string& path) const;
  // tf.train.Checkpoint.restore: every tracked object, and the save counter, from `path`.
  // kolo::Error naming the path and what is wrong: no such file, damaged, a tracked name
  // it does not hold, a tensor of another shape.
  void restore(const std::string& path);
  std::int64_t save_counter() const { return save_counter_; }

 private:
  struct Module {
    std::string name;
    std::shared_ptr<torch::nn::Module> module;
  };
  struct Optimizer {
    std::string name;
    torch::optim::Optimizer* optimizer;
  };
  struct Tensor {
    std::string name;
    torch::Tensor tensor;
  };
  friend class CheckpointManager;  // its save(number) counts too
  void check_new_name(const std::string& name) const;
  std::vector<Module> modules_;
  std::vector<Optimizer> optimizers_;
  std::vector<Tensor> tensors_;
  std::int64_t save_counter_ = 0;
};

// tf.train.latest_checkpoint: the path of the latest checkpoint the "checkpoint" file in
// `directory` names, or nullopt when there is none (no such file, or the checkpoint it
// names is gone).
std::optional<std::string> latest_checkpoint(const std::string& directory);

class CheckpointManager {
 public:
  // tf.train.CheckpointManager: checkpoints of `checkpoint` in `directory` (created when
  // missing), named <checkpoint_name>-<number>; the newest `max_to_keep` are kept (nullopt:
  // all; otherwise at least 1). Reads the directory's "checkpoint" file, so a restarted
  // program knows the ones kept before.
  CheckpointManager(Checkpoint& checkpoint, std::string directory,
                    std::optional<int> max_to_keep = 5, std::string checkpoint_name = "ckpt");
  // Writes a checkpoint numbered `checkpoint_number` (default: the save counter; it goes
  // up by one either way, as TensorFlow's), deletes the oldest beyond max_to_keep, updates
  // the "checkpoint" file, and returns the new path.
  std::string save(std::optional<std::int64_t> checkpoint_number = std::nullopt);
  // The newest kept checkpoint, or nullopt before the first.
  std::optional<std::string> latest_checkpoint() const;
  // The kept checkpoints, oldest first.
  const std::vector<std::string>& checkpoints() const { return kept_; }
  // Restores the latest checkpoint and returns its path; nullopt (nothing restored) when
  // there is none yet, the first run's case.
  std::optional<std::string> restore_or_initialize();
  const std::string& directory() const { return directory_; }

 private:
  Checkpoint& checkpoint_;
  std::string directory_;
  std::optional<int> max_to_keep_;
  std::string checkpoint_name_;
  std::vector<std::string> kept_;
};

}  // namespace kolo::train
