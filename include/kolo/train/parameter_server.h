// Parameter-server training with TensorFlow 2's semantics:
// tf.distribute.experimental.ParameterServerStrategy and ClusterCoordinator. Part of
// <kolo/train.h>.
//
// Every process of the job runs the same program; TF_CONFIG (or kolorun --ps) says which
// task it is. Variables live on the ps tasks (round-robin, large ones split by a
// partitioner), each with its optimizer state there; workers run steps the chief schedules:
// pull the current parameters, compute gradients on their own data, push them.
//
//   kolo::train::ParameterServerStrategy strategy;            // from TF_CONFIG
//   auto net = make_net();
//   strategy.create_variables(*net, kolo::train::Adam{});     // every task, same module
//   strategy.register_step("train", [&](const torch::Tensor&) {
//     strategy.pull(*net);                 // current parameters
//     auto loss = loss_of(net, next_batch());
//     loss.backward();
//     strategy.push(*net);                 // gradients, applied on the ps tasks
//     return loss.detach();
//   });
//   if (!strategy.is_chief()) { strategy.join(); return 0; }   // workers, ps: serve
//   kolo::train::ClusterCoordinator coordinator(strategy);
//   for (int i = 0; i < 100; ++i) coordinator.schedule("train");
//   coordinator.join();
//
// Model::fit accepts this strategy too (TensorFlow's restrictions: steps_per_epoch is
// required, logs and callbacks are per epoch); see docs/ps.md.
//
// Not for: all-reduce strategies (strategy.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "kolo/train/data.h"
#include "kolo/train/logs.h"
#include "kolo/train/optimizers.h"
#include "kolo/train/strategy.h"
#include "kolo/train/variable_partitioner.h"

namespace kolo::train {

// A cluster: each job's tasks' "host:port", in index order (tf.train.ClusterSpec).
struct ClusterSpec {
  std::vector<std::string> chief, worker, ps, evaluator;
};

// tf.distribute.cluster_resolver: the cluster and this process's task.
class ClusterResolver {
 public:
  // TFConfigClusterResolver: TF_CONFIG, with TensorFlow's validation and messages (throws
  // kolo::Error); a parameter-server cluster needs at least one ps and one worker.
  static ClusterResolver from_tf_config();
  ClusterResolver(ClusterSpec cluster, std::string task_type, int task_index);
  const ClusterSpec& cluster_spec() const { return cluster_; }
  const std::string& task_type() const { return type_; }  // "chief", "worker", "ps", "evaluator"
  int task_id() const { return index_; }

 private:
  ClusterSpec cluster_;
  std::string type_;
  int index_ = 0;
};

struct ParameterServerOptions {
  // 0: asynchronous, TensorFlow's mode: every push is applied at once. K > 0: synchronous
  // (TF1's SyncReplicasOptimizer): the scheduled steps form rounds; round r's steps pull
  // the parameters after r updates and K of their gradients are averaged into update r + 1;
  // later ones (backups') are dropped. K = number of workers is all-reduce training.
  int replicas_to_aggregate = 0;
  // Synchronous mode: steps per round (TF1's total_num_replicas); those past the first K
  // to push are backups, their gradients dropped as stale. Default (0): K. Each round's
  // steps run on different workers, so at most the number of workers.
  int total_num_replicas = 0;
  // A ps task, or every worker, not answering for this long fails the chief's calls
  // naming it. Default: KOLO_PEER_TIMEOUT_SECONDS (60 s).
  double timeout_seconds = -1;
  // A step running longer is taken as its worker's failure (it runs again elsewhere).
  double step_timeout_seconds = 600;
};

class ParameterServerStrategy : public Strategy {
 public:
  explicit ParameterServerStrategy(ClusterResolver resolver = ClusterResolver::from_tf_config(),
                                   VariablePartitioner partitioner = {},
                                   ParameterServerOptions options = {});

  const std::string& task_type() const;
  int task_index() const;
  int num_ps() const;
  int num_worker_tasks() const;  // the cluster's workers (num_workers() is 1, as TF's
                                 // num_replicas_in_sync: replicas in one step)
  const ParameterServerOptions& ps_options() const;

  // Puts the module's parameters on the ps tasks (the chief: created with its current
  // values and `optimizer`'s update rule; found as they are when they exist already, for
  // a restarted chief) or binds them (every other task). Every task calls it with the same
  // module structure. Parameters of torch::nn::Embedding modules built with sparse(true)
  // are sparse: pulls can fetch some rows and pushes send only the rows with gradients.
  // Only Adam, SGD and RMSprop (a CustomOptimizer is refused: it cannot run on a ps task).
  void create_variables(torch::nn::Module& module, const OptimizerSpec& optimizer) const;
  // Sets the module's parameters to the ps tasks' values. A sparse parameter named in
  // `rows` gets only those rows (an int64 tensor of row indices; others keep stale values).
  // Synchronous mode, inside a scheduled step: waits for the parameters of the step's round
  // (docs/ps.md, "Modes").
  void pull(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& rows = {}) const;
  // Sends the module's gradients (parameters without a gradient send nothing in
  // asynchronous mode and zeros in synchronous mode). Returns false when a synchronous push
  // was stale (dropped). Zeroes the gradients.
  bool push(torch::nn::Module& module) const;
  // Every shard's learning rate (the chief; a schedule or ReduceLROnPlateau).
  void set_learning_rate(double learning_rate) const;

  // A step the chief can schedule by name: every process registers the same steps.
  using Step = std::function<torch::Tensor(const torch::Tensor& args)>;
  void register_step(const std::string& name, Step step) const;

  // Serves this task's role until the chief ends the job: a ps task its shards, a worker
  // the registered steps. Returns at once on the chief and the evaluator.
  void join() const;

  // The chief: every shard's values and optimizer state to `path` (atomically), and back.
  void save_checkpoint(const std::string& path) const;
  void restore_checkpoint(const std::string& path) const;
  // Bytes this process sent in pushes (tests: sparse pushes carry only touched rows).
  std::uint64_t push_bytes_sent() const;

  struct PsImpl;
  PsImpl& ps_impl() const;

 private:
  friend class ClusterCoordinator;
};

// tf.distribute's RemoteValue: a scheduled step's result on the chief.
class RemoteValue {
 public:
  RemoteValue() = default;
  // Waits for the step; its result (an undefined tensor for a step returning none).
  // Throws kolo::Error with the step's error, or "cancelled" when an earlier step failed.
  torch::Tensor fetch() const;
  bool ready() const;
  // Which worker task ran it (its last attempt), and how many attempts it took.
  int worker() const;
  int attempts() const;

  struct Impl;
  explicit RemoteValue(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

// tf.distribute.experimental.coordinator.ClusterCoordinator (the chief only).
class ClusterCoordinator {
 public:
  // The chief's coordinator (one per strategy: a second ClusterCoordinator shares it). The
  // workers and ps tasks are told the job is over when the chief's strategy is destroyed
  // (its last copy): their join() returns then.
  explicit ClusterCoordinator(const ParameterServerStrategy& strategy);
  ~ClusterCoordinator();
  ClusterCoordinator(const ClusterCoordinator&) = delete;
  ClusterCoordinator& operator=(const ClusterCoordinator&) = delete;

  // Queues the step on some free worker and returns at once. Throws the first error of an
  // earlier step not yet reported (then cleared), as TensorFlow.
  RemoteValue schedule(const std::string& step, const torch::Tensor& args = {});
  // Waits for every scheduled step; throws the first step error (queued steps are
  // cancelled; the error is then cleared). A dead ps task's error names it.
  void join();
  bool done() const;
  // Workers answering now; times a worker was lost and came back.
  int workers_up() const;
  std::int64_t worker_failures() const;
  std::int64_t worker_rejoins() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

class Model;

struct SidecarEvaluatorOptions {
  // Where the chief's ModelCheckpoint writes (every regular file there is a checkpoint).
  std::string checkpoint_dir;
  std::int64_t steps = -1;       // evaluate()'s steps per checkpoint (-1: all the data)
  std::int64_t batch_size = 32;  // evaluate()'s
  // Stop after this many evaluations (-1: until the process is stopped, as TensorFlow's).
  int max_evaluations = -1;
  double poll_seconds = 1;  // how often the directory is looked at
};

// tf.keras.utils.SidecarEvaluator, for the evaluator task of a parameter-server job: it
// evaluates each new checkpoint the chief writes (the newest not yet evaluated: like
// TensorFlow's, it may skip some when the chief writes faster) and prints one line a
// checkpoint, "Evaluated checkpoint PATH: loss 0.41 - accuracy 0.86".
class SidecarEvaluator {
 public:
  SidecarEvaluator(Model& model, const Dataset& data, SidecarEvaluatorOptions options);
  ~SidecarEvaluator();
  // Runs until max_evaluations (or forever); returns the logs of every evaluation.
  std::vector<Logs> start();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::train
