// A small, fixed classification problem and model for kolo_train's tests: the same data
// and initial weights in every process, so that a strategy's result can be compared with
// one replica's.
//
// Not for: anything but tests.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "kolo/train.h"

namespace kolo::train::testing {

struct TinyProblem {
  torch::Tensor x, y;  // x float32 [n, features], y int64 [n] in [0, classes)
};

// Examples drawn from a fixed seed; labels from a fixed random linear map, so that a
// model can learn them.
inline TinyProblem tiny_problem(std::int64_t n = 96, std::int64_t features = 8,
                                std::int64_t classes = 3) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  TinyProblem p;
  p.x = torch::randn({n, features}, gen);
  torch::Tensor w = torch::randn({features, classes}, gen);
  p.y = torch::matmul(p.x, w).argmax(1);
  return p;
}

// A two-layer MLP with weights from a fixed seed.
inline torch::nn::Sequential tiny_net(std::int64_t features = 8, std::int64_t classes = 3) {
  torch::manual_seed(42);
  return Sequential({Dense(16, "relu", features), Dense(classes)});
}

}  // namespace kolo::train::testing
