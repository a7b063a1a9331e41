// compile()'s optimizers: Keras's names and defaults on libtorch's optimizers
// (optimizers.h).
//
// Not for: learning-rate access during training (model.cc goes through the options).
#include <type_traits>

#include "kolo/error.h"
#include "kolo/train/optimizers.h"

namespace kolo::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerSpec& spec,
                                                        std::vector<torch::Tensor> params) {
  return std::visit(
      [&params](const auto& o) -> std::unique_ptr<torch::optim::Optimizer> {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, Adam>) {
          return std::make_unique<torch::optim::Adam>(params,
                                                      torch::optim::AdamOptions(o.learning_rate)
                                                          .betas({o.beta_1, o.beta_2})
                                                          .eps(o.epsilon)
                                                          .amsgrad(o.amsgrad)
                                                          .weight_decay(o.weight_decay));
        } else if constexpr (std::is_same_v<T, SGD>) {
          return std::make_unique<torch::optim::SGD>(params,
                                                     torch::optim::SGDOptions(o.learning_rate)
                                                         .momentum(o.momentum)
                                                         .nesterov(o.nesterov)
                                                         .weight_decay(o.weight_decay));
        } else if constexpr (std::is_same_v<T, RMSprop>) {
          return std::make_unique<torch::optim::RMSprop>(
              params, torch::optim::RMSpropOptions(o.learning_rate)
                          .alpha(o.rho)
                          .eps(o.epsilon)
                          .momentum(o.momentum)
                          .centered(o.centered));
        } else {
          if (!o.make) {
            throw Error(ErrorCode::kInvalidArgument,
                        "compile: the CustomOptimizer '" + o.name + "' has no make function");
          }
          auto made = o.make(std::move(params));
          if (!made) {
            throw Error(ErrorCode::kInvalidArgument,
                        "compile: the CustomOptimizer '" + o.name + "' made no optimizer");
          }
          return made;
        }
      },
      spec);
}

std::string optimizer_name(const OptimizerSpec& spec) {
  return std::visit(
      [](const auto& o) -> std::string {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, Adam>) return "Adam";
        if constexpr (std::is_same_v<T, SGD>) return "SGD";
        if constexpr (std::is_same_v<T, RMSprop>) return "RMSprop";
        if constexpr (std::is_same_v<T, CustomOptimizer>) return o.name;
      },
      spec);
}

}  // namespace kolo::train
