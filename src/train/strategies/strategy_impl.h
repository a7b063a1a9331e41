// The state behind a Strategy handle, shared by its copies and used by model.cc.
//
// Not for: the public interface (include/kolo/train/strategy.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"
#include "kolo/train/parameter_server.h"
#include "kolo/train/strategy.h"
#include "train/strategies/extended.h"

namespace kolo::train {

// Runs a function on every local replica at once: replica 0 on the caller's thread, the
// others on threads of their own. One run at a time.
class ReplicaPool {
 public:
  // intra_op_threads > 0: each replica thread sets libtorch's thread count to it.
  ReplicaPool(int replicas, int intra_op_threads);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;
  // fn(r) for every replica r; waits for all; rethrows the first exception (replica 0's
  // first, else another's).
  void run(const std::function<void(int)>& fn);
  int size() const { return size_; }

 private:
  void serve(int replica, int intra_op_threads);
  const int size_;
  std::mutex run_mu_;  // one run() at a time
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* fn_ = nullptr;  // GUARDED_BY(mu_)
  std::uint64_t generation_ = 0;                  // GUARDED_BY(mu_)
  int pending_ = 0;                               // GUARDED_BY(mu_)
  bool stopping_ = false;                         // GUARDED_BY(mu_)
  std::exception_ptr error_;                      // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

// What one worker reads of a dataset, under its sharding policy (kAuto resolved; kData
// with one worker), and for kFile with several workers the step count they agree on (the
// longest worker's; the others run empty slices past their data). Every worker must call
// it then (one allreduce named `name`). Used by fit and by Strategy::distribute.
struct WorkerInput {
  Dataset local;
  AutoShardPolicy policy = AutoShardPolicy::kData;
  std::int64_t force_steps = -1;
};
WorkerInput load_worker_input(const Strategy& strategy, const Dataset& data,
                              std::int64_t global_batch, std::int64_t max_steps,
                              const std::string& name);

struct Strategy::Impl {
  std::string name;
  std::vector<torch::Device> devices;
  // The workers and this one's index, as at construction. With `runtime` (the strategies
  // over kolo's runtime: MultiWorkerMirroredStrategy, HorovodStrategy) Strategy's accessors
  // read kolo::size()/rank() instead while kolo runs, as an elastic job renumbers the
  // workers at each change (these then only answer when kolo is down).
  int workers = 1, worker = 0;
  bool runtime = false;
  bool horovod = false;  // Strategy::horovod(); what it changes is in `extended`
  // What the strategy does inside Model's loops (extended.h).
  std::shared_ptr<const StrategyExtended> extended = all_reduce_extended();
  CommunicationOptions options;
  std::unique_ptr<ReplicaPool> pool;
  // ParameterServerStrategy's state (null for the other strategies).
  std::shared_ptr<ParameterServerStrategy::PsImpl> ps;
};

// Whether this process is a worker of an elastic job (kolorun --min-np/--max-np) with a
// strategy over kolo's runtime: workers may join mid-training, so nothing collective may
// run before elastic fit's sync (model.cc), and plain fit is refused (fit.cc).
inline bool elastic_job(const Strategy::Impl& s) { return s.runtime && kolo::elastic::enabled(); }

}  // namespace kolo::train
