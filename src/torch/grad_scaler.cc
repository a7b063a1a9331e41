// GradScaler (kolo/torch.h): torch.amp.GradScaler's dynamic loss scaling; with a
// DistributedOptimizer it checks the reduced gradients, which are the same on every rank.
#include <cmath>
#include <string>
#include <vector>

#include "kolo/torch.h"

namespace kolo {

namespace {

std::vector<torch::Tensor> params_of(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> out;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) out.push_back(p);
  }
  return out;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  const bool ok = std::isfinite(options_.init_scale) && options_.init_scale > 0 &&
                  options_.growth_factor > 1 && options_.backoff_factor > 0 &&
                  options_.backoff_factor < 1 && options_.growth_interval > 0;
  if (!ok) {
    throw Error(ErrorCode::kInvalidArgument,
                "GradScaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 "
                "and growth_interval > 0; got " +
                    std::to_string(options_.init_scale) + ", " +
                    std::to_string(options_.growth_factor) + ", " +
                    std::to_string(options_.backoff_factor) + ", " +
                    std::to_string(options_.growth_interval));
  }
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return options_.enabled ? loss * scale_ : loss;
}

void GradScaler::unscale_params(const std::vector<torch::Tensor>& params) {
  if (unscaled_) {
    throw Error(ErrorCode::kInvalidArgument,
                "GradScaler: unscale_() was already called since the last update(): call "
                "update() after each step()");
  }
  unscaled_ = true;
  if (!options_.enabled) return;
  torch::NoGradGuard no_grad;
  const double inverse = 1.0 / scale_;
  bool found = false;
  for (const auto& p : params) {
    torch::Tensor g = p.grad();
    if (!g.defined()) continue;
    g.mul_(inverse);
    if (!found && !torch::isfinite(g).all().item<bool>()) found = true;
  }
  found_inf_ = found_inf_ || found;
}

void GradScaler::unscale_(DistributedOptimizer& optimizer) {
  optimizer.synchronize();  // the reduced gradients: the same on every rank
  unscale_params(params_of(optimizer.optimizer()));
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (auto* distributed = dynamic_cast<DistributedOptimizer*>(&optimizer)) {
    return unscale_(*distributed);
  }
  unscale_params(params_of(optimizer));
}

bool GradScaler::step(DistributedOptimizer& optimizer) {
  if (!unscaled_) unscale_(optimizer);
  if (found_inf_) return false;
  auto reduced = optimizer.skip_synchronize();  // synchronize() ran in unscale_()
  optimizer.step();
  return true;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (auto* distributed = dynamic_cast<DistributedOptimizer*>(&optimizer)) {
    return step(*distributed);
  }
  if (!unscaled_) unscale_(optimizer);
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (options_.enabled) {
    if (found_inf_) {
      scale_ *= options_.backoff_factor;
      growth_tracker_ = 0;
    } else if (++growth_tracker_ == options_.growth_interval) {
      scale_ *= options_.growth_factor;
      growth_tracker_ = 0;
    }
  }
  unscaled_ = false;
  found_inf_ = false;
}

torch::Dict<std::string, double> GradScaler::state_dict() const {
  torch::Dict<std::string, double> d;
  d.insert("scale", scale_);
  d.insert("growth_factor", options_.growth_factor);
  d.insert("backoff_factor", options_.backoff_factor);
  d.insert("growth_interval", static_cast<double>(options_.growth_interval));
  d.insert("_growth_tracker", static_cast<double>(growth_tracker_));
  return d;
}

void GradScaler::load_state_dict(const torch::Dict<std::string, double>& state) {
  for (const char* key : {"scale", "_growth_tracker"}) {
    if (!state.contains(key)) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("GradScaler::load_state_dict: no '") + key + "' in the state");
    }
  }
  scale_ = state.at("scale");
  growth_tracker_ = static_cast<std::int64_t>(state.at("_growth_tracker"));
  if (state.contains("growth_factor")) options_.growth_factor = state.at("growth_factor");
  if (state.contains("backoff_factor")) options_.backoff_factor = state.at("backoff_factor");
  if (state.contains("growth_interval")) {
    options_.growth_interval = static_cast<std::int64_t>(state.at("growth_interval"));
  }
}

}  // namespace kolo
