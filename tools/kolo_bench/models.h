// Parameter shapes of two reference models, for `kolo_bench gradients`: the list of
// gradient tensors a DistributedOptimizer would allreduce each step.
//
//   resnet50   torchvision's resnet50 (161 tensors, 25,557,032 parameters)
//   bert-base  Hugging Face's BertModel for bert-base-uncased with pooler
//              (199 tensors, 109,482,240 parameters)
//
// Only names and shapes, in the models' registration order (the order of
// named_parameters(); backward produces gradients roughly in reverse). Not a model
// implementation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo_bench {

struct ParamShape {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t numel() const;
};

struct ModelParams {
  std::string model;
  std::vector<ParamShape> params;
  std::int64_t total_numel() const;
};

// The parameter list of `model` ("resnet50" or "bert-base"). Throws std::invalid_argument
// for another name, and std::logic_error when the list does not add up to the model's
// known tensor count and parameter total (a bug in the list, with both numbers).
ModelParams model_params(const std::string& model);

// The accepted model names.
std::vector<std::string> model_choices();

}  // namespace kolo_bench
