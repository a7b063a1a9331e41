// The state behind a ParameterServerStrategy: this task's role, its server (a ps task's
// shards or a worker's steps), the PsClient to the ps tasks, and the variables bound to a
// module's parameters. Used by parameter_server.cc and ps_fit.cc.
//
// Not for: the public interface (include/kolo/train/parameter_server.h).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kolo/train/parameter_server.h"
#include "ps/coordinator.h"
#include "ps/partition.h"
#include "ps/ps_service.h"
#include "ps/rpc.h"
#include "ps/task.h"

namespace kolo::train {

// A step's tensor as bytes (dtype, dims, sizes, data) and back; "" is an undefined tensor.
std::string encode_tensor(const torch::Tensor& t);
// Throws kolo::Error for a failed Status.
void check_status(const Status& s);
torch::Tensor decode_tensor(const std::string& bytes);

struct ParameterServerStrategy::PsImpl {
  PsImpl(ClusterResolver r, VariablePartitioner p, ParameterServerOptions o);
  ~PsImpl();

  ClusterResolver resolver;
  ps::Partitioner partitioner;
  ParameterServerOptions options;
  std::string secret;                  // KOLO_RENDEZVOUS_SECRET
  double start_timeout_seconds = 300;  // KOLO_START_TIMEOUT_SECONDS
  std::string self;                    // "/job:worker/replica:0/task:1"

  std::unique_ptr<ps::PsClient> client;   // chief, workers, evaluator
  std::unique_ptr<ps::RpcServer> server;  // ps tasks, workers (in join())
  std::unique_ptr<ps::PsService> ps_service;
  std::unique_ptr<ps::WorkerService> worker_service;

  struct Variable {
    std::string name;
    torch::Tensor param;
    std::vector<int> shards;  // into `shards`
    bool sparse = false;
  };
  std::mutex mu;
  ps::UpdateRule rule;                // GUARDED_BY(mu)
  std::vector<ps::ShardInfo> shards;  // GUARDED_BY(mu)
  std::vector<Variable> vars;         // GUARDED_BY(mu)
  std::vector<std::int64_t> pulled;   // GUARDED_BY(mu): per shard, the version pulled
  std::map<std::string, Step> steps;  // GUARDED_BY(mu)
  std::shared_ptr<std::mutex> step_mu = std::make_shared<std::mutex>();  // one step at a time

  // The chief: a heartbeat to every worker and ps task each second, so that a task whose
  // chief died stops serving in the bound (serve()), and one that went silent is told to
  // stop only briefly at the end (a dead task does not hold the chief's exit).
  std::unique_ptr<ps::ChiefHeartbeat> heartbeat;

  std::unique_ptr<ps::Coordinator> coordinator;  // the chief's, made on first use
  double learning_rate_sent = -1;                // the chief: the ps tasks' rate

  Deadline deadline() const;
  // Synchronous mode: the round of the step running on this thread (the version its pull
  // waits for and its push carries); 0 outside a step and in asynchronous mode.
  std::int64_t sync_round() const;
  ps::Coordinator& coordinator_for_chief();
  // The chief: tells the ps tasks when the learning rate (a callback's) has changed.
  void sync_learning_rate(double lr);
  // Every worker and ps task (the workers, then the ps tasks, in the cluster's order).
  std::vector<ps::TaskAddress> other_tasks() const;
  bool is_chief() const { return resolver.task_type() == "chief"; }
  // Binds the module's parameters to shards (the chief creates them).
  void bind(torch::nn::Module& module, const OptimizerSpec& optimizer, bool create);
  void pull(const std::map<std::string, torch::Tensor>& rows);
  bool push();
  // Serves a ps task's or a worker's role until the chief's stop.
  void serve();
};

}  // namespace kolo::train
