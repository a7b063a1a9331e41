// Keras-style Dense stacks as torch::nn::Sequential, with Keras's initialisation
// (layers.h).
//
// Not for: other layer kinds.
#include "kolo/train/layers.h"
#include "kolo/error.h"

namespace kolo::train {

torch::nn::Sequential Sequential(const std::vector<Dense>& layers) {
  torch::nn::Sequential seq;
  std::int64_t in = -1;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Dense& d = layers[i];
    if (d.input_dim > 0) in = d.input_dim;
    if (in <= 0 || d.units <= 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Sequential: layer " + std::to_string(i) + " (Dense(" + std::to_string(d.units) +
                      ")) needs " +
                      (d.units <= 0 ? std::string("a positive number of units")
                                    : "input_dim (the first layer's input size)"));
    }
    torch::nn::Linear linear(in, d.units);
    torch::NoGradGuard no_grad;
    torch::nn::init::xavier_uniform_(linear->weight);  // Keras's glorot_uniform
    torch::nn::init::zeros_(linear->bias);
    seq->push_back(linear);
    if (d.activation == "relu") {
      seq->push_back(torch::nn::ReLU());
    } else if (d.activation == "sigmoid") {
      seq->push_back(torch::nn::Sigmoid());
    } else if (d.activation == "tanh") {
      seq->push_back(torch::nn::Tanh());
    } else if (d.activation == "softmax") {
      seq->push_back(torch::nn::Softmax(torch::nn::SoftmaxOptions(-1)));
    } else if (!d.activation.empty() && d.activation != "linear") {
      throw Error(ErrorCode::kInvalidArgument, "Sequential: layer " + std::to_string(i) +
                                                   " has the unknown activation '" + d.activation +
                                                   "' (relu, sigmoid, tanh, softmax or linear)");
    }
    in = d.units;
  }
  return seq;
}

}  // namespace kolo::train
