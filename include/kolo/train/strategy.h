// Distribution strategies with tf.distribute's semantics. Part of <kolo/train.h>.
//
//   kolo::train::MirroredStrategy strategy({"cpu:0", "cpu:1"});   // 2 replicas, 1 process
//   kolo::train::Model model(make_net(), strategy);               // replicas built here
//
// A replica is a copy of the model on one device, run by its own thread; all replicas
// hold the same parameters. Each step gives each replica its slice of the GLOBAL batch;
// losses are scaled by 1/num_replicas_in_sync and the gradients SUMMED over the replicas
// (in process first, then over the workers through kolo's runtime), so N replicas take
// the step one replica takes on the whole batch.
//
// A Strategy is a handle: copies share the same replicas' threads and job.
//
// Not for: models and fit (model.h), input pipelines (data.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "kolo/train/data.h"
#include "kolo/types.h"

namespace kolo::train {

// tf.distribute.experimental.CommunicationImplementation.
enum class CommunicationImplementation {
  kAuto,  // kolo's choice (KOLO_TRANSPORT, else shm/MPI/Gloo as the job allows)
  kRing,  // TensorFlow's ring over the network: kolo's Gloo transport
  kNccl,  // NCCL for GPU tensors; without GPUs a warning, then as kAuto
};

// tf.distribute.experimental.CommunicationOptions, for MultiWorkerMirroredStrategy.
struct CommunicationOptions {
  // Gradients are fused into packs of at most this many bytes (KOLO_FUSION_THRESHOLD);
  // 0: kolo's default (64 MiB).
  std::int64_t bytes_per_pack = 0;
  // A collective that takes longer fails naming the workers it waited for
  // (KOLO_PEER_TIMEOUT_SECONDS); default: kolo's (60 s). TensorFlow's default is to wait
  // forever; kolo never waits unbounded.
  std::optional<double> timeout_seconds{};
  CommunicationImplementation implementation = CommunicationImplementation::kAuto;
};

// What a replica's function sees in Strategy::run (tf.distribute.ReplicaContext).
struct ReplicaContext {
  int replica_id_in_sync_group = 0;  // worker_index * local replicas + local id
  int local_replica_id = 0;
  int num_replicas_in_sync = 1;
  torch::Device device = torch::kCPU;
};

// One value per local replica (tf.distribute's PerReplica; experimental_local_results).
using PerReplica = std::vector<torch::Tensor>;

// tf.nn.compute_average_loss, for custom loops: the sum of `per_example_loss` (times
// `sample_weight`: one weight an example, [batch] or Keras's [batch, 1], or one per loss
// value) divided by the global batch size, so that
// the gradients summed over every replica (Strategy::all_reduce_gradients) are those of
// the mean over the global batch. The global batch size defaults to per_example_loss's
// first dimension times num_replicas_in_sync (the context's); 0 gives a loss of 0, as
// TensorFlow's. kolo::Error (kInvalidArgument) for a scalar per_example_loss, a negative
// global batch size, or a sample_weight of another shape.
struct AverageLossOptions {
  torch::Tensor sample_weight{};                    // undefined: every example weighs 1
  std::optional<std::int64_t> global_batch_size{};  // default: rows x num_replicas_in_sync
};
torch::Tensor compute_average_loss(const torch::Tensor& per_example_loss,
                                   const ReplicaContext& context,
                                   const AverageLossOptions& options = {});
// Outside Strategy::run (one replica, or a global batch size given).
torch::Tensor compute_average_loss(const torch::Tensor& per_example_loss,
                                   const AverageLossOptions& options = {});
// tf.nn.scale_regularization_loss: the sum of `regularization_loss` divided by
// num_replicas_in_sync, so that a term every replica adds counts once in the summed
// gradients.
torch::Tensor scale_regularization_loss(const torch::Tensor& regularization_loss,
                                        const ReplicaContext& context);

struct DistributeOptions {
  bool shuffle = false;    // a new order each epoch (DistributedDataset::set_epoch)
  std::uint64_t seed = 0;  // the same on every worker: epoch e uses seed + e
};

// One step's input: per local replica, its examples and labels (y undefined without
// labels), on the replica's device.
struct DistributedBatch {
  PerReplica x, y;
};

// Iterates one epoch of per-replica batches; set_epoch(e) chooses the epoch (the shuffle).
class DistributedDataset {
 public:
  std::int64_t steps() const { return plan_.steps; }
  DistributedBatch batch(std::int64_t step) const;
  void set_epoch(std::int64_t epoch);

  class iterator {
   public:
    iterator(const DistributedDataset* d, std::int64_t s) : d_(d), s_(s) {}
    DistributedBatch operator*() const { return d_->batch(s_); }
    iterator& operator++() {
      ++s_;
      return *this;
    }
    bool operator!=(const iterator& o) const { return s_ != o.s_; }

   private:
    const DistributedDataset* d_;
    std::int64_t s_;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, steps()); }

 private:
  friend class Strategy;
  Dataset data_;  // what this worker reads
  PlanOptions options_;
  EpochPlan plan_;
  std::vector<torch::Device> devices_;
};

class Strategy {
 public:
  // tf.distribute's default strategy: one replica on the CPU, one worker.
  Strategy();
  virtual ~Strategy();

  // "default", "one_device", "mirrored", "multi_worker_mirrored" or "horovod".
  const std::string& name() const;
  // The local replicas' devices, one per replica.
  const std::vector<torch::Device>& devices() const;
  int num_local_replicas() const;
  int num_workers() const;
  int worker_index() const;          // TF's id_in_cluster (kolo's rank)
  int num_replicas_in_sync() const;  // local replicas x workers
  bool is_chief() const;
  const CommunicationOptions& communication_options() const;
  // Horovod's way (HorovodStrategy): one replica per process, kolo::DistributedOptimizer
  // averaging gradients, weights broadcast from rank 0, metrics averaged per epoch.
  bool horovod() const;

  // Runs fn on every local replica, concurrently (one thread each), and returns their
  // results. The first exception of any replica is rethrown after all have finished.
  PerReplica run(const std::function<torch::Tensor(const ReplicaContext&)>& fn) const;
  // Reduces per-replica values over the replicas and workers (every worker must call it):
  // kSum or kAverage element-wise (axis none), or with axis 0 also over the first
  // dimension (kAverage then divides by the total number of rows, as TF). The result is
  // on the CPU.
  torch::Tensor reduce(ReduceOp op, const PerReplica& values,
                       std::optional<std::int64_t> axis = std::nullopt) const;
  // The dataset as the local replicas' batches (tf.distribute's
  // experimental_distribute_dataset): global batches of `global_batch_size`, sliced and
  // sharded as fit does (data.h), each slice on its replica's device. Every worker must
  // call it (a dataset of files agrees on the number of steps).
  DistributedDataset distribute(const Dataset& dataset, std::int64_t global_batch_size,
                                const DistributeOptions& options = {}) const;
  // Runs fn(replica) on every local replica's thread; used by Model.
  void for_each_replica(const std::function<void(int local_replica)>& fn) const;

  // --- custom training loops (docs/training.md, "Custom training loops") ---
  // One model per local replica, each on its replica's device: replica 0 is `module`
  // itself (moved there), the others its clones (the module must be cloneable, as for
  // Model). With several workers, the chief's parameters and buffers are broadcast first
  // (TensorFlow creates each variable from the chief's value), so every replica of every
  // worker starts alike. Every worker must call it.
  std::vector<std::shared_ptr<torch::nn::Module>> replicate(
      const std::shared_ptr<torch::nn::Module>& module) const;
  template <typename Holder>
  std::vector<Holder> replicate(const Holder& module) const {
    std::vector<Holder> out;
    for (auto& m : replicate(std::static_pointer_cast<torch::nn::Module>(module.ptr()))) {
      out.emplace_back(std::dynamic_pointer_cast<typename Holder::ContainedType>(m));
    }
    return out;
  }
  // What an optimizer's apply_gradients does under a TensorFlow strategy: each parameter's
  // gradient summed (kSum, TensorFlow's rule: scale the loss with compute_average_loss)
  // or averaged (kAverage) over the local replicas and the workers, and the result put in
  // every replica's gradient, so that the replicas' optimizers take the same step. A
  // parameter without a gradient on any replica of any worker is left alone; one with a
  // gradient on some counts zeros for the others (the workers agree on which first, so a
  // step that touches other parameters on each worker cannot mix them). `replicas` as
  // replicate() gave them (the same structure in each). Every worker must call it, once
  // per step.
  void all_reduce_gradients(const std::vector<std::shared_ptr<torch::nn::Module>>& replicas,
                            ReduceOp op = ReduceOp::kSum) const;
  template <typename Holder>
  void all_reduce_gradients(const std::vector<Holder>& replicas,
                            ReduceOp op = ReduceOp::kSum) const {
    std::vector<std::shared_ptr<torch::nn::Module>> modules;
    for (const Holder& m : replicas) modules.push_back(m.ptr());
    all_reduce_gradients(modules, op);
  }

  struct Impl;

 protected:
  explicit Strategy(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
  friend class Model;
};

// tf.distribute.OneDeviceStrategy: one replica on `device` ("cpu", "cpu:0", "gpu:1",
// "cuda:1", "/device:GPU:0", ...). Throws kolo::Error for a device this process lacks.
class OneDeviceStrategy : public Strategy {
 public:
  explicit OneDeviceStrategy(const std::string& device);
};

// tf.distribute.MirroredStrategy: one replica per device in this process. Default: every
// visible GPU, else one replica on the CPU. "cpu:0", "cpu:1", ... are CPU replicas (one
// thread each), so that mirrored training runs, and is tested, without GPUs. Intra-op
// threads are shared out: each replica's thread uses cores / replicas of them.
class MirroredStrategy : public Strategy {
 public:
  explicit MirroredStrategy(const std::vector<std::string>& devices = {});
};

// tf.distribute.MultiWorkerMirroredStrategy: the workers of a job (TF_CONFIG, kolorun,
// mpirun, torch-style MASTER_ADDR/RANK/WORLD_SIZE, Slurm; see docs/startup.md), each with
// `devices` as MirroredStrategy's (default: every visible GPU, else the CPU). Calls
// kolo::init() with the options (unless kolo is running already). Weights are broadcast
// from the chief when a Model is built; gradients are reduced in process, then through
// kolo's runtime (fused; with one replica per worker, overlapped with backward).
class MultiWorkerMirroredStrategy : public Strategy {
 public:
  explicit MultiWorkerMirroredStrategy(CommunicationOptions options = {},
                                       const std::vector<std::string>& devices = {});
};

// Horovod's way through the same fit(): kolo::init(), one replica per process on
// kolo::device(), kolo::DistributedOptimizer (averaging), weights broadcast from rank 0,
// metrics averaged over the workers at each epoch end (Horovod's MetricAverageCallback:
// an average of the workers' averages).
class HorovodStrategy : public Strategy {
 public:
  HorovodStrategy();
};

// A device name as TensorFlow or libtorch writes it -> the torch device.
torch::Device parse_device(const std::string& name);

}  // namespace kolo::train
