// A ps task's service: it holds variable shards, applies updates with their optimizer
// state kept beside them, and answers pulls, on an RpcServer (rpc.h). PsClient is how the
// chief and the workers reach every ps task of the job.
//
//   ps task:  PsService service(rpc_server);   // registers its methods; serve until stop
//   chief:    client.create(shard, init_bytes, rule, sync)      // once per shard
//   worker:   client.pull({...}); ... compute gradients ...; client.push({...})
//
// Updates (UpdateRule) are libtorch's SGD, Adam and RMSprop step formulas (the ones
// kolo_train's compile() uses) on float32 or float64 shards, so a ps-trained step equals
// a local one. Dense pushes update the whole shard; row pushes (sparse gradients of an
// embedding) update only the rows pushed, with their optimizer state (lazy, as
// torch.optim.SparseAdam: untouched rows' moments do not decay).
//
// Modes (per shard, set at creation):
//   asynchronous (replicas_to_aggregate 0, TensorFlow's ParameterServerStrategy): each push
//     is applied at once; the version counts applied pushes.
//   synchronous (replicas_to_aggregate K, TF1's SyncReplicasOptimizer): pushes carry the
//     version their parameters were pulled at; a push of an older version is stale and
//     dropped (accepted = false); K pushes of the current version are summed, divided by
//     K, applied once, and the version goes up by one. A pull with min_version waits
//     (bounded by its deadline) until the shard reaches it: the worker's token barrier.
//
// Not for: which shard lives where (partition.h), scheduling steps (coordinator.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "kolo/types.h"
#include "ps/rpc.h"

namespace kolo::ps {

// libtorch's optimizers' hyperparameters (torch::optim::SGDOptions, AdamOptions,
// RMSpropOptions; RMSprop's alpha is Keras's rho). Defaults are Keras's.
struct UpdateRule {
  enum class Kind : std::uint8_t { kSgd, kAdam, kRmsprop };
  Kind kind = Kind::kSgd;
  double learning_rate = 0.01;
  double momentum = 0;  // SGD, RMSprop
  bool nesterov = false;
  double weight_decay = 0;  // SGD, Adam
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;  // Adam, RMSprop
  bool amsgrad = false;
  double rho = 0.9;  // RMSprop
  bool centered = false;
};

// One shard of a variable: rows [row_begin, row_begin + shape[0]) of the whole variable
// (a variable of one shard has row_begin 0 and its whole shape; a 0-d variable has an
// empty shape).
struct ShardInfo {
  std::string variable;  // the variable's name (a module's parameter name)
  int shard = 0;         // index among the variable's shards
  int ps_task = 0;       // which ps task holds it
  std::vector<std::int64_t> shape;
  DataType dtype = DataType::kFloat32;  // float32 or float64
  std::int64_t row_begin = 0;
  std::size_t bytes() const;
  std::size_t row_bytes() const;  // bytes of one row (shape[1:]); the whole for 0-d
};

// Everything a checkpoint needs of a shard.
struct ShardState {
  std::string values;                                      // shard bytes
  std::vector<std::pair<std::string, std::string>> slots;  // optimizer state, by name
  std::int64_t step = 0;                                   // updates applied (Adam's t)
  std::int64_t version = 0;
};

// Serves the shards of one ps task. Registers its methods on `server` (before start()).
class PsService {
 public:
  explicit PsService(RpcServer& server);
  ~PsService();
  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;
  // Wakes every waiting pull with an error (the task is stopping).
  void shutdown();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// One shard's part of a batched pull: the whole shard (rows empty) or some rows
// (shard-local indices, each in [0, shape[0])), into `out` (shard bytes, or
// rows.size() x row_bytes). min_version: wait until the shard's version reaches it.
struct Pull {
  const ShardInfo* shard = nullptr;
  void* out = nullptr;
  std::vector<std::int64_t> rows{};
  bool whole = true;  // false: rows only (rows may then be empty: nothing is fetched)
  std::int64_t min_version = 0;
  std::int64_t version = 0;  // out: the version the values are of
};

// One shard's part of a batched push: a dense gradient of the shard's shape, or rows.
struct Push {
  const ShardInfo* shard = nullptr;
  const void* grad = nullptr;  // shard bytes, or rows.size() x row_bytes
  std::vector<std::int64_t> rows{};
  bool whole = true;
  std::int64_t version = 0;  // synchronous mode: the version pulled
  bool accepted = false;     // out: applied or counted (false: stale, dropped)
};

struct PsClientOptions {
  std::vector<std::string> endpoints;  // per ps task: "tcp://host:port"
  std::vector<std::string> names;      // per ps task: "/job:ps/replica:0/task:0"
  std::string secret{};
  std::string self;  // this task's name
};

// The chief's and workers' view of every ps task. Batched calls send one request per ps
// task, to all of them at once, and wait for all. Errors name the ps task (and the
// variable/shard where one is at fault).
class PsClient {
 public:
  explicit PsClient(PsClientOptions options);
  ~PsClient();
  int num_ps() const;
  const std::string& ps_name(int ps_task) const;

  // Creates the shard on its ps task with `initial` values (shard bytes), or finds it:
  // *existed = true, values kept, when a shard of this variable and index exists with the
  // same shape, dtype and row_begin (a restarted chief); another spec is kMismatch.
  Status create(const ShardInfo& shard, const void* initial, const UpdateRule& rule,
                int replicas_to_aggregate, bool* existed, Deadline deadline);
  Status pull(std::vector<Pull>& pulls, Deadline deadline);
  Status push(std::vector<Push>& pushes, Deadline deadline);
  // Every shard on every ps task gets the new learning rate (a schedule, ReduceLROnPlateau).
  Status set_learning_rate(double learning_rate, Deadline deadline);
  Status read_state(const ShardInfo& shard, ShardState* out, Deadline deadline);
  // Replaces values, optimizer state, step and version (restore from a checkpoint).
  Status assign_state(const ShardInfo& shard, const ShardState& state, Deadline deadline);
  // A cheap round trip to ps task `ps_task` (liveness).
  Status ping(int ps_task, Deadline deadline);
  // Bytes this client sent to ps tasks in pushes (fields and blobs), for tests.
  std::uint64_t push_bytes_sent() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::ps
