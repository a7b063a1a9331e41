// The founding example's network, shared by examples/fashion_mnist.cc and the benchmarks
// that must train exactly the same model (bench/plain_fashion_mnist.cc,
// bench/kolo_step_profile.cc).
#pragma once

#include <torch/torch.h>

namespace kolo_examples {

// conv 3x3 (1 -> 32) + ReLU, max-pool 2, linear (32*13*13 -> 64) + ReLU, linear (64 -> 10);
// returns log-probabilities (log_softmax), trained with nll_loss: cross entropy.
struct NetImpl : torch::nn::Module {
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  NetImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 13 * 13, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv(x)), 2).flatten(1);
    return torch::log_softmax(fc2(torch::relu(fc1(x))), 1);
  }
};
TORCH_MODULE(Net);

}  // namespace kolo_examples
