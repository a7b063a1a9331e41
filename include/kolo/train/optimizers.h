// Optimizers for compile(), with Keras's names and defaults, built on libtorch's.
// Part of <kolo/train.h>.
//
// Keras and libtorch differ in two details, kept as libtorch has them: SGD's momentum
// accumulates gradients and is scaled by the learning rate at the update (Keras scales
// before accumulating: the same while the learning rate is constant), and Adam adds
// epsilon to the bias-corrected sqrt(v) (Keras to the uncorrected one).
//
// Not for: the distributed wrapper (kolo::DistributedOptimizer in <kolo/torch.h>).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <torch/torch.h>

namespace kolo::train {

struct Adam {
  double learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;  // Keras's default (libtorch's is 1e-8)
  bool amsgrad = false;
  double weight_decay = 0;
};

struct SGD {
  double learning_rate = 0.01;
  double momentum = 0;
  bool nesterov = false;
  double weight_decay = 0;
};

struct RMSprop {
  double learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0;
  double epsilon = 1e-7;
  bool centered = false;
};

// Any libtorch optimizer over the given parameters.
struct CustomOptimizer {
  std::string name{};
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)> make{};
};

using OptimizerSpec = std::variant<Adam, SGD, RMSprop, CustomOptimizer>;

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerSpec& spec,
                                                        std::vector<torch::Tensor> params);
std::string optimizer_name(const OptimizerSpec& spec);

}  // namespace kolo::train
