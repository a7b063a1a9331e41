// The ps update rules against libtorch's own optimizers: random values and gradients,
// several steps, float32 and float64, dense and rows-only (lazy) updates.
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cstring>
#include <memory>

#include "ps/update_rule.h"

namespace kolo::ps {
namespace {

std::unique_ptr<torch::optim::Optimizer> torch_optimizer(const UpdateRule& r, torch::Tensor p) {
  std::vector<torch::Tensor> params{p};
  switch (r.kind) {
    case UpdateRule::Kind::kSgd:
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(r.learning_rate)
                                                             .momentum(r.momentum)
                                                             .nesterov(r.nesterov)
                                                             .weight_decay(r.weight_decay));
    case UpdateRule::Kind::kAdam:
      return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(r.learning_rate)
                                                              .betas({r.beta_1, r.beta_2})
                                                              .eps(r.epsilon)
                                                              .amsgrad(r.amsgrad)
                                                              .weight_decay(r.weight_decay));
    case UpdateRule::Kind::kRmsprop:
      return std::make_unique<torch::optim::RMSprop>(params,
                                                     torch::optim::RMSpropOptions(r.learning_rate)
                                                         .alpha(r.rho)
                                                         .eps(r.epsilon)
                                                         .momentum(r.momentum)
                                                         .centered(r.centered)
                                                         .weight_decay(r.weight_decay));
  }
  return nullptr;
}

struct Case {
  const char* name;
  UpdateRule rule;
};

std::vector<Case> cases() {
  using K = UpdateRule::Kind;
  std::vector<Case> c;
  c.push_back({"sgd", {.kind = K::kSgd, .learning_rate = 0.1}});
  c.push_back({"sgd_momentum_wd",
               {.kind = K::kSgd, .learning_rate = 0.05, .momentum = 0.9, .weight_decay = 0.01}});
  c.push_back({"sgd_nesterov",
               {.kind = K::kSgd, .learning_rate = 0.05, .momentum = 0.8, .nesterov = true}});
  c.push_back({"adam", {.kind = K::kAdam, .learning_rate = 0.01}});
  c.push_back({"adam_wd_amsgrad",
               {.kind = K::kAdam,
                .learning_rate = 0.01,
                .weight_decay = 0.1,
                .beta_1 = 0.8,
                .beta_2 = 0.99,
                .epsilon = 1e-6,
                .amsgrad = true}});
  c.push_back({"rmsprop", {.kind = K::kRmsprop, .learning_rate = 0.01}});
  c.push_back({"rmsprop_centered_momentum",
               {.kind = K::kRmsprop,
                .learning_rate = 0.01,
                .momentum = 0.9,
                .weight_decay = 0.05,
                .epsilon = 1e-5,
                .rho = 0.8,
                .centered = true}});
  return c;
}

// Runs `steps` steps of `rule` on a [rows x 5] tensor in both libtorch and kolo. With
// `subset` non-empty, kolo updates only those rows and libtorch steps the tensor made of
// those rows alone (the lazy reference); the other rows must stay as they were.
void check(const UpdateRule& rule, torch::ScalarType type, const std::vector<std::int64_t>& subset,
           const char* name) {
  torch::manual_seed(42);
  const std::int64_t rows = 6, cols = 5;
  const auto opts = torch::TensorOptions().dtype(type);
  torch::Tensor start = torch::randn({rows, cols}, opts);
  const bool sparse = !subset.empty();
  torch::Tensor index = torch::tensor(subset, torch::kLong);
  torch::Tensor ref =
      (sparse ? start.index_select(0, index) : start).clone().set_requires_grad(true);
  auto opt = torch_optimizer(rule, ref);
  const DataType dtype = type == torch::kFloat64 ? DataType::kFloat64 : DataType::kFloat32;
  const std::size_t esize = dtype_size(dtype);
  std::string values(static_cast<std::size_t>(rows * cols) * esize, '\0');
  std::memcpy(values.data(), start.data_ptr(), values.size());
  std::vector<std::string> slots(slot_names(rule).size(), std::string(values.size(), '\0'));
  std::vector<void*> slot_ptrs;
  for (auto& s : slots) slot_ptrs.push_back(s.data());
  for (int step = 1; step <= 6; ++step) {
    torch::Tensor g = torch::randn(ref.sizes(), opts);
    ref.mutable_grad() = g.clone();
    opt->step();
    torch::Tensor gc = g.contiguous();
    if (sparse) {
      apply_update_rows(rule, dtype, step, values.data(), gc.data_ptr(), slot_ptrs, subset,
                        static_cast<std::size_t>(cols));
    } else {
      apply_update(rule, dtype, step, values.data(), gc.data_ptr(), slot_ptrs, 0,
                   static_cast<std::size_t>(rows * cols));
    }
  }
  torch::Tensor ours = torch::from_blob(values.data(), {rows, cols}, opts).clone();
  torch::Tensor want = start.clone();
  if (sparse) {
    want.index_copy_(0, index, ref.detach());
  } else {
    want = ref.detach();
  }
  const double tol = type == torch::kFloat64 ? 1e-12 : 2e-6;
  const double err = (ours - want).abs().max().item<double>();
  EXPECT_LE(err, tol) << name << (type == torch::kFloat64 ? " float64" : " float32")
                      << (sparse ? " rows" : " dense") << ": max difference " << err;
  // The update did something (a test of a no-op would pass the comparison too).
  EXPECT_GT((ours - start).abs().max().item<double>(), 1e-4) << name;
}

TEST(UpdateRuleTorchTest, DenseStepsEqualLibtorchs) {
  for (const auto& c : cases()) {
    check(c.rule, torch::kFloat32, {}, c.name);
    check(c.rule, torch::kFloat64, {}, c.name);
  }
}

TEST(UpdateRuleTorchTest, RowStepsEqualLibtorchOnThoseRowsAndLeaveTheOthers) {
  for (const auto& c : cases()) {
    check(c.rule, torch::kFloat32, {4, 1, 3}, c.name);
    check(c.rule, torch::kFloat64, {0, 5}, c.name);
  }
}

}  // namespace
}  // namespace kolo::ps
