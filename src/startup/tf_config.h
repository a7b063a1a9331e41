// TF_CONFIG: TensorFlow's description of a multi-worker job, parsed and validated with
// TensorFlow's rules (tensorflow/python/distribute/multi_worker_util.py):
//
//   {"cluster": {"chief": ["host:port"], "worker": ["host:port", ...], "ps": [...],
//                "evaluator": ["host:port"]},
//    "task": {"type": "worker", "index": 1}}
//
// Pure: text in, value or error out. launch_env.cc turns the result into ranks (chief
// first, then the workers in order) and the store's address.
//
// Also the pieces the parameter-server layer (src/ps, src/train) needs from TF_CONFIG: a
// ps cluster's own rules (validate_ps_cluster) and TensorFlow's task names.
//
// Not for: ranks, the store, or which roles kolo runs (launch_env.h); the sparse
// {"worker": {"1": "host:port"}} form of a ClusterSpec, which is refused.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "startup/config.h"

namespace kolo::core {

// The cluster of a TF_CONFIG: for each job, its tasks' "host:port" in index order.
struct TfCluster {
  std::vector<std::string> chief, worker, ps, evaluator;
  bool empty() const { return chief.empty() && worker.empty() && ps.empty() && evaluator.empty(); }
  // The addresses of job `type` (one of the four), or nullptr for another name.
  const std::vector<std::string>* job(const std::string& type) const;
};

struct TfConfig {
  TfCluster cluster;
  std::string task_type;  // "" when TF_CONFIG has no task
  int task_index = 0;
};

// Parses `text` (the value of TF_CONFIG) into *out. Checked, in TensorFlow's order after
// the JSON itself: each cluster job is known and a list of "host:port" strings; a cluster
// with tasks needs a task with a type and an index (a non-negative integer, or its decimal
// text as TensorFlow's int() takes it); the type is chief, worker, ps or evaluator; it is a
// job of the cluster (an evaluator need not be); at most one chief and one evaluator; the
// index is in range. Every failure is kInvalidArgument starting "TF_CONFIG: " and naming
// the value. A TF_CONFIG without a cluster (or with an empty one) is valid: the task runs
// alone, as in TensorFlow.
Status parse_tf_config(const std::string& text, TfConfig* out);

// TF_CONFIG from `env`: *present says whether it is set (and not empty); when it is not,
// *out is an empty TfConfig and the result is OK. Otherwise as parse_tf_config.
Status parse_tf_config_from_env(const Env& env, TfConfig* out, bool* present);
// The same from this process's environment (core::process_env()).
Status parse_tf_config_from_env(TfConfig* out, bool* present);

// TensorFlow's checks of a parameter-server cluster (ParameterServerStrategy's
// _verify_args_and_config), in its order: kInvalidArgument with kNoWorkerMessage when the
// cluster has no worker task, then kNoPsMessage when it has no ps task; each message goes
// on to say what the cluster has. kolorun --ps uses the same two sentences.
inline constexpr const char* kNoWorkerMessage = "There must be at least one worker.";
inline constexpr const char* kNoPsMessage = "There must be at least one ps.";
Status validate_ps_cluster(const TfCluster& cluster);

// TensorFlow's device-name form of a task: tf_task_name("worker", 1) is
// "/job:worker/replica:0/task:1" (what its error messages and device placement say).
std::string tf_task_name(const std::string& type, int index);

}  // namespace kolo::core
