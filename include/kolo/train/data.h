// Input for fit/evaluate/predict and custom loops: datasets from tensors, from IDX files
// and from lists of files, with tf.data's auto-sharding policies. Part of <kolo/train.h>.
//
// Batching follows tf.distribute: a batch is GLOBAL (batch_size over every replica of
// every worker); each global batch is cut into num_replicas_in_sync consecutive slices,
// as even as possible (the first ones one longer), and replica g (worker * local replicas
// + local id) takes slice g. The last batch may be partial: some replicas then get fewer
// or no examples, and every replica still takes part in the step (nobody waits for
// another forever).
//
// Not for: libtorch DataLoaders (kolo::DistributedSampler in <kolo/torch.h> serves them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kolo::train {

// tf.data.experimental.AutoShardPolicy.
enum class AutoShardPolicy {
  kAuto,  // kFile for a dataset of files, else kData
  kFile,  // each worker reads only its files (round-robin); fewer files than workers is
          // an error, as in TensorFlow
  kData,  // every worker sees every example and keeps its replicas' slices of each batch
  kOff,   // no sharding: every worker processes every example
};

class Dataset {
 public:
  Dataset() = default;
  // Examples along the first dimension of x and y (y may be undefined: predict).
  static Dataset from_tensors(torch::Tensor x, torch::Tensor y = {});
  // An MNIST-format IDX pair (kolo::load_idx_dataset): images float32 in [0, 1] shaped
  // [N, rows * cols] with flatten (the founding program's x / 255 flattened to 784), else
  // [N, 1, rows, cols]; labels int64 [N] in [0, num_classes).
  static Dataset from_idx(const std::string& images, const std::string& labels, bool flatten = true,
                          std::int64_t num_classes = 10);
  // A dataset of files (tf.data's file-based datasets): `load` turns one file into
  // (x, y); with kFile/kAuto each worker loads only its own files.
  using FileLoader = std::function<std::pair<torch::Tensor, torch::Tensor>(const std::string&)>;
  static Dataset from_files(std::vector<std::string> files, FileLoader load);

  Dataset with_auto_shard_policy(AutoShardPolicy policy) const;
  AutoShardPolicy auto_shard_policy() const { return policy_; }
  bool file_based() const { return !files_.empty(); }
  const std::vector<std::string>& files() const { return files_; }

  // In-memory examples (not file-based): their count, and the tensors.
  std::int64_t size() const;
  const torch::Tensor& x() const { return x_; }
  const torch::Tensor& y() const { return y_; }
  // The examples [begin, end) (Keras's validation_split takes the last ones).
  Dataset slice(std::int64_t begin, std::int64_t end) const;
  // The examples this worker reads under the policy: all of them, or (kFile) those of
  // its files. Throws kolo::Error for kFile with fewer files than workers.
  Dataset load_for_worker(int worker, int workers) const;

 private:
  torch::Tensor x_, y_;
  std::vector<std::string> files_;
  FileLoader load_;
  AutoShardPolicy policy_ = AutoShardPolicy::kAuto;
};

// Which examples each local replica gets at each step of one epoch.
struct EpochPlan {
  std::int64_t steps = 0;
  // pieces[step][local replica]: indices (int64) into the worker's loaded examples.
  std::vector<std::vector<torch::Tensor>> pieces{};
};

struct PlanOptions {
  std::int64_t examples = 0;  // in the worker's loaded data
  std::int64_t global_batch = 32;
  int workers = 1, worker = 0, local_replicas = 1;
  // kData: every worker holds the same examples and keeps its replicas' slices of each
  // global batch. kOff / kFile: the worker's own batches of global_batch / workers,
  // cut among its local replicas.
  AutoShardPolicy policy = AutoShardPolicy::kData;
  bool shuffle = false;
  std::uint64_t seed = 0;  // the permutation of an epoch comes from seed + epoch
  std::int64_t epoch = 0;
  std::int64_t max_steps = -1;    // cap (steps_per_epoch); -1: the whole data
  std::int64_t force_steps = -1;  // run exactly this many (empty slices past the data)
};
EpochPlan plan_epoch(const PlanOptions& options);

// The slices of `count` examples over `parts` replicas: sizes as even as possible, the
// first ones one longer.
std::vector<std::int64_t> split_sizes(std::int64_t count, int parts);

}  // namespace kolo::train
