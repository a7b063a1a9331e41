// Datasets and the per-epoch plan of which examples each replica gets (data.h).
//
// Not for: running steps (model.cc).
#include <algorithm>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>

#include "kolo/error.h"
#include "kolo/torch.h"
#include "kolo/train/data.h"

namespace kolo::train {

Dataset Dataset::from_tensors(torch::Tensor x, torch::Tensor y) {
  if (!x.defined() || x.dim() == 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "Dataset::from_tensors: x must be a tensor with the examples along its first "
                "dimension");
  }
  if (y.defined() && (y.dim() == 0 || y.size(0) != x.size(0))) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "Dataset::from_tensors: x has " + std::to_string(x.size(0)) + " examples but y " +
            (y.dim() == 0 ? std::string("is a scalar") : "has " + std::to_string(y.size(0))) +
            "; give one label row per example");
  }
  Dataset d;
  d.x_ = std::move(x);
  d.y_ = std::move(y);
  return d;
}

Dataset Dataset::from_idx(const std::string& images, const std::string& labels, bool flatten,
                          std::int64_t num_classes) {
  IdxDataset data = load_idx_dataset(images, labels, num_classes);
  torch::Tensor x = data.images;
  if (flatten) x = x.reshape({x.size(0), -1});
  return from_tensors(x, data.labels);
}

Dataset Dataset::from_files(std::vector<std::string> files, FileLoader load) {
  if (files.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "Dataset::from_files: the list of files is empty");
  }
  if (!load) throw Error(ErrorCode::kInvalidArgument, "Dataset::from_files: no loader given");
  Dataset d;
  d.files_ = std::move(files);
  d.load_ = std::move(load);
  return d;
}

Dataset Dataset::with_auto_shard_policy(AutoShardPolicy policy) const {
  Dataset d = *this;
  d.policy_ = policy;
  return d;
}

std::int64_t Dataset::size() const {
  if (file_based()) {
    throw Error(ErrorCode::kInvalidArgument,
                "Dataset::size: a dataset of files has no size before it is loaded "
                "(load_for_worker)");
  }
  return x_.defined() ? x_.size(0) : 0;
}

Dataset Dataset::slice(std::int64_t begin, std::int64_t end) const {
  const std::int64_t n = size();
  begin = std::clamp<std::int64_t>(begin, 0, n);
  end = std::clamp<std::int64_t>(end, begin, n);
  Dataset d = *this;
  d.x_ = x_.slice(0, begin, end);
  if (y_.defined()) d.y_ = y_.slice(0, begin, end);
  return d;
}

Dataset Dataset::load_for_worker(int worker, int workers) const {
  if (!file_based()) return *this;
  std::vector<std::string> mine;
  if (policy_ == AutoShardPolicy::kData || policy_ == AutoShardPolicy::kOff) {
    mine = files_;
  } else {
    const int n = static_cast<int>(files_.size());
    if (n < workers) {
      // TensorFlow's InvalidArgumentError for the same case.
      throw Error(ErrorCode::kInvalidArgument,
                  "auto-sharding by file: the dataset has " + std::to_string(n) +
                      (n == 1 ? " file" : " files") + ", fewer than the " +
                      std::to_string(workers) +
                      " workers, so some workers would get no data; give at least one file "
                      "per worker, or use AutoShardPolicy::kData (or kOff)");
    }
    for (int i = worker; i < n; i += workers) mine.push_back(files_[i]);
  }
  std::vector<torch::Tensor> xs, ys;
  for (const std::string& f : mine) {
    auto [x, y] = load_(f);
    if (!x.defined() || (y.defined() && y.size(0) != x.size(0))) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Dataset::from_files: the loader gave " +
                      (x.defined() ? std::to_string(x.size(0)) : std::string("no")) +
                      " examples but " + (y.defined() ? std::to_string(y.size(0)) : "no") +
                      " labels for " + f);
    }
    xs.push_back(x);
    if (y.defined()) ys.push_back(y);
  }
  Dataset d = from_tensors(torch::cat(xs), ys.empty() ? torch::Tensor() : torch::cat(ys));
  d.policy_ = policy_;
  return d;
}

std::vector<std::int64_t> split_sizes(std::int64_t count, int parts) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(parts), count / parts);
  for (std::int64_t i = 0; i < count % parts; ++i) ++out[static_cast<std::size_t>(i)];
  return out;
}

EpochPlan plan_epoch(const PlanOptions& o) {
  if (o.global_batch <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "batch_size must be positive, not " + std::to_string(o.global_batch));
  }
  const bool global = o.policy == AutoShardPolicy::kData || o.policy == AutoShardPolicy::kAuto;
  // Examples per batch as this worker sees them: the global batch (kData: the worker
  // keeps its replicas' slices), or the worker's own share of it.
  const std::int64_t batch =
      global ? o.global_batch : std::max<std::int64_t>(1, o.global_batch / o.workers);
  const int parts = global ? o.workers * o.local_replicas : o.local_replicas;
  const int first = global ? o.worker * o.local_replicas : 0;

  torch::Tensor order;
  if (o.shuffle) {
    auto gen =
        at::make_generator<at::CPUGeneratorImpl>(o.seed + static_cast<std::uint64_t>(o.epoch));
    order = torch::randperm(o.examples, gen, torch::kLong);
  } else {
    order = torch::arange(o.examples, torch::kLong);
  }
  std::int64_t steps = (o.examples + batch - 1) / batch;
  if (o.max_steps >= 0) steps = std::min(steps, o.max_steps);
  if (o.force_steps >= 0) steps = o.force_steps;

  EpochPlan plan;
  plan.steps = steps;
  plan.pieces.resize(static_cast<std::size_t>(steps));
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::int64_t lo = std::min(o.examples, s * batch);
    const std::int64_t hi = std::min(o.examples, lo + batch);
    const std::vector<std::int64_t> sizes = split_sizes(hi - lo, parts);
    std::int64_t at = lo;
    for (int p = 0; p < first; ++p) at += sizes[static_cast<std::size_t>(p)];
    auto& step = plan.pieces[static_cast<std::size_t>(s)];
    for (int l = 0; l < o.local_replicas; ++l) {
      const std::int64_t n = sizes[static_cast<std::size_t>(first + l)];
      step.push_back(order.slice(0, at, at + n));
      at += n;
    }
  }
  return plan;
}

}  // namespace kolo::train
