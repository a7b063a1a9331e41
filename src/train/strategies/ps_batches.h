// The batches of one worker in Model::fit with a ParameterServerStrategy (ps_fit.cc): its
// shard of the data (examples w, w + W, ... for worker w of W), repeated without end and
// cut into full batches, as TensorFlow's tutorial dataset `shuffle(...).repeat().batch(n)`
// gives: a batch spans the end of one pass and the start of the next, and a shard smaller
// than the batch appears in it more than once. Each pass has a new order when shuffling
// (seed + pass, the worker's own).
//
// Not for: the all-reduce strategies' batches (data.h's Dataset and fit.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "kolo/error.h"

namespace kolo::train::detail {

class WorkerBatches {
 public:
  WorkerBatches(std::int64_t examples, int workers, int worker, std::int64_t batch, bool shuffle,
                std::uint64_t seed)
      : batch_(batch),
        shuffle_(shuffle),
        seed_(seed + static_cast<std::uint64_t>(worker) * 1000003u) {
    for (std::int64_t i = worker; i < examples; i += workers) mine_.push_back(i);
    if (mine_.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "fit: worker " + std::to_string(worker) + " of " + std::to_string(workers) +
                      " has no examples (the data has " + std::to_string(examples) + ")");
    }
    new_pass();
  }
  // The next batch_size example indices (an int64 tensor).
  torch::Tensor next() {
    std::vector<std::int64_t> idx;
    idx.reserve(static_cast<std::size_t>(batch_));
    while (static_cast<std::int64_t>(idx.size()) < batch_) {
      if (at_ == order_.size()) new_pass();
      idx.push_back(order_[at_++]);
    }
    return torch::tensor(idx, torch::kLong);
  }

 private:
  void new_pass() {
    order_ = mine_;
    if (shuffle_) {
      std::mt19937_64 rng(seed_ + pass_);
      std::shuffle(order_.begin(), order_.end(), rng);
    }
    ++pass_;
    at_ = 0;
  }
  std::vector<std::int64_t> mine_, order_;
  std::size_t at_ = 0;
  std::uint64_t pass_ = 0;
  std::int64_t batch_;
  bool shuffle_;
  std::uint64_t seed_;
};

}  // namespace kolo::train::detail
