// kolo::GradScaler across the worker's ranks (torch_worker.cc runs it at 1, 2 and 3
// workers): with a DistributedOptimizer, an inf injected on the last rank alone makes
// every rank skip the same step and halve the scale, and the parameters follow one
// process's steps on the global batch (skipping that step); the scale doubles after
// growth_interval good steps; unscale_() once before clipping; state_dict round trip;
// bad options refused.
#include <limits>
#include <string>
#include <vector>

#include "check.h"
#include "tensor_checks.h"

namespace kolo_test {
namespace {

void check_skips_together() {
  const int rank = kolo::rank(), size = kolo::size();
  const std::int64_t per_rank = 3, n = per_rank * size;
  torch::manual_seed(21);
  const torch::Tensor x_all = torch::randn({n, 3}, torch::kDouble);
  const torch::Tensor t_all = torch::randn({n, 2}, torch::kDouble);
  auto make = [] {
    torch::manual_seed(22);
    torch::nn::Linear m(3, 2);
    m->to(torch::kDouble);
    return m;
  };
  torch::nn::Linear ref = make(), net = make();
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  kolo::DistributedOptimizer opt(sgd, net->named_parameters(), {.name_prefix = "scaler."});
  kolo::GradScaler scaler({.init_scale = 1024, .growth_interval = 3});
  const int bad_step = 2;
  double want_scale = 1024;
  int good_in_a_row = 0;
  for (int step = 0; step < 6; ++step) {
    const std::string at = "step " + std::to_string(step) + ": ";
    torch::Tensor x = x_all.slice(0, rank * per_rank, (rank + 1) * per_rank).clone();
    if (step == bad_step && rank == size - 1) x[0][0] = std::numeric_limits<double>::infinity();
    opt.zero_grad();
    const torch::Tensor loss =
        torch::mse_loss(net->forward(x), t_all.slice(0, rank * per_rank, (rank + 1) * per_rank));
    scaler.scale(loss).backward();
    if (step == 1) {  // unscale_ first, to clip; step() does not unscale again
      scaler.unscale_(opt);
      expect_error([&] { scaler.unscale_(opt); }, "already called");
      torch::nn::utils::clip_grad_norm_(net->parameters(), 1e9);
    }
    const bool stepped = scaler.step(opt);
    scaler.update();
    expect(stepped == (step != bad_step), at + "stepped " + std::to_string(stepped));
    if (step == bad_step) {
      want_scale *= 0.5;
      good_in_a_row = 0;
    } else if (++good_in_a_row == 3) {
      want_scale *= 2;
      good_in_a_row = 0;
    }
    expect(scaler.get_scale() == want_scale, at + "scale " + std::to_string(scaler.get_scale()) +
                                                 ", expected " + std::to_string(want_scale));
    if (step != bad_step) {  // the reference skips the bad step too
      ref_opt.zero_grad();
      torch::mse_loss(ref->forward(x_all), t_all).backward();
      ref_opt.step();
    }
    expect_close(net->weight, ref->weight, 1e-10, 1e-12, at + "weight against one process");
    expect_close(net->bias, ref->bias, 1e-10, 1e-12, at + "bias against one process");
  }
  // Every rank ends with the same scale and tracker.
  const auto all = kolo::allgather(
      torch::tensor({scaler.get_scale(), static_cast<double>(scaler.growth_tracker())},
                    torch::kDouble)
          .view({1, 2}),
      {.name = "scaler.state"});
  expect(all.eq(all[0]).all().item<bool>(), "every rank's scale and growth tracker agree");
  // state_dict round trip.
  kolo::GradScaler restored;
  restored.load_state_dict(scaler.state_dict());
  expect(restored.get_scale() == scaler.get_scale() &&
             restored.growth_tracker() == scaler.growth_tracker(),
         "state_dict round trip");
  expect_error([] { kolo::GradScaler bad({.backoff_factor = 1.5}); }, "backoff_factor");
  // Disabled: no scaling, always steps.
  kolo::GradScaler off({.enabled = false});
  expect(off.get_scale() == 1.0 && off.scale(torch::ones({1})).item<double>() == 1.0,
         "a disabled scaler does not scale");
}

}  // namespace

void check_grad_scaler() { check_skips_together(); }

}  // namespace kolo_test
