// Keras-style layer shorthands that build libtorch modules, for programs written as the
// founding one: Sequential({Dense(64, "relu", 784), Dense(10)}). Part of <kolo/train.h>.
//
// Dense initialises as Keras does (Glorot-uniform kernel, zero bias), not as
// torch::nn::Linear does (Kaiming-uniform with a = sqrt(5), uniform bias).
//
// Not for: anything beyond a stack of dense layers; use torch::nn directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace kolo::train {

struct Dense {
  std::int64_t units = 0;
  std::string activation{};     // "", "linear", "relu", "sigmoid", "tanh", "softmax"
  std::int64_t input_dim = -1;  // Keras's input_shape=(input_dim,); -1: the previous layer's units
  Dense(std::int64_t units_, std::string activation_ = "", std::int64_t input_dim_ = -1)
      : units(units_), activation(std::move(activation_)), input_dim(input_dim_) {}
};

// The layers as a torch::nn::Sequential (Linear, then the activation's module). The first
// layer needs input_dim. Throws kolo::Error for an unknown activation or a missing size.
torch::nn::Sequential Sequential(const std::vector<Dense>& layers);

}  // namespace kolo::train
