// kolo::SyncBatchNorm across the worker's ranks (torch_worker.cc runs it at 1, 2 and 3
// workers) against libtorch's BatchNorm on the whole global batch in this process: rank
// r holds 2 + r examples (uneven, so counts matter), every rank builds the same global
// batch from one seed and takes its rows. Forward outputs, the input's gradient, the
// parameters' gradients summed over the ranks and the running statistics must equal the
// reference's (float64, 1e-10); eval mode uses the running statistics with no
// collective; DistributedOptimizer's averaged step matches one model's on the global
// batch; convert_sync_batchnorm swaps the layers of a Sequential or ModuleList keeping
// their values and refuses, naming it, one in a field of a module of the user's own; a
// wrong channel count is an error naming the layer and the shape.
#include <string>
#include <vector>

#include "check.h"
#include "tensor_checks.h"

namespace kolo_test {
namespace {

// This rank's rows of a global batch of sum(2 + r) rows: [begin, end).
std::pair<std::int64_t, std::int64_t> my_rows(int rank) {
  std::int64_t begin = 0;
  for (int r = 0; r < rank; ++r) begin += 2 + r;
  return {begin, begin + 2 + rank};
}

std::int64_t global_rows(int size) {
  std::int64_t n = 0;
  for (int r = 0; r < size; ++r) n += 2 + r;
  return n;
}

// One layer of each dimensionality: the same values and gradients as BatchNorm's.
template <typename BatchNorm>
void check_layer(const std::vector<std::int64_t>& sample_shape, const std::string& tag) {
  const int rank = kolo::rank(), size = kolo::size();
  const std::int64_t channels = sample_shape[0];
  std::vector<std::int64_t> shape = {global_rows(size)};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  torch::manual_seed(11);
  const torch::Tensor x_all = torch::randn(shape, torch::kDouble) * 3 + 1;
  const torch::Tensor coeff_all = torch::randn(shape, torch::kDouble);
  const torch::Tensor weight = torch::rand({channels}, torch::kDouble) + 0.5;
  const torch::Tensor bias = torch::randn({channels}, torch::kDouble);

  BatchNorm ref(channels);
  ref->to(torch::kDouble);
  kolo::SyncBatchNormOptions options(channels);
  options.name = "check.syncbn." + tag;
  kolo::SyncBatchNorm sync(options);
  sync->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    ref->weight.copy_(weight);
    ref->bias.copy_(bias);
    sync->weight.copy_(weight);
    sync->bias.copy_(bias);
  }
  const auto [begin, end] = my_rows(rank);
  for (int step = 0; step < 2; ++step) {  // twice: the running statistics move on
    const torch::Tensor xr = x_all.detach().clone().requires_grad_(true);
    const torch::Tensor y_ref = ref->forward(xr);
    (y_ref * coeff_all).sum().backward();

    const torch::Tensor x = x_all.slice(0, begin, end).detach().clone().requires_grad_(true);
    const torch::Tensor y = sync->forward(x);
    (y * coeff_all.slice(0, begin, end)).sum().backward();

    const std::string at = tag + " step " + std::to_string(step) + ": ";
    expect_close(y, y_ref.slice(0, begin, end), 1e-10, 1e-10, at + "forward output");
    expect_close(x.grad(), xr.grad().slice(0, begin, end), 1e-9, 1e-10, at + "input gradient");
    expect_close(kolo::allreduce(sync->weight.grad(),
                                 {.name = "check.syncbn.gw." + tag, .op = kolo::ReduceOp::kSum}),
                 ref->weight.grad(), 1e-9, 1e-10, at + "weight gradient summed over the ranks");
    expect_close(kolo::allreduce(sync->bias.grad(),
                                 {.name = "check.syncbn.gb." + tag, .op = kolo::ReduceOp::kSum}),
                 ref->bias.grad(), 1e-9, 1e-10, at + "bias gradient summed over the ranks");
    expect_close(sync->running_mean, ref->running_mean, 1e-10, 1e-12, at + "running mean");
    expect_close(sync->running_var, ref->running_var, 1e-10, 1e-12, at + "running variance");
    expect(sync->num_batches_tracked.item<std::int64_t>() == step + 1, at + "batches tracked");
    ref->weight.mutable_grad().reset();
    ref->bias.mutable_grad().reset();
    sync->weight.mutable_grad().reset();
    sync->bias.mutable_grad().reset();
  }
  // Eval mode: the running statistics, no collective (rank 0 alone runs an extra one).
  ref->eval();
  sync->eval();
  const torch::Tensor x = x_all.slice(0, begin, end);
  if (rank == 0) {
    for (int i = 0; i < 3; ++i) sync->forward(x);
  }
  expect_close(sync->forward(x), ref->forward(x), 1e-10, 1e-12, tag + ": eval mode");
}

// Two ranks' DistributedOptimizer steps through a model with a SyncBatchNorm equal one
// model's steps on the global batch (even batches: the averages agree).
void check_training() {
  const int rank = kolo::rank(), size = kolo::size();
  const std::int64_t per_rank = 4, n = per_rank * size;
  torch::manual_seed(5);
  const torch::Tensor x_all = torch::randn({n, 3}, torch::kDouble);
  const torch::Tensor t_all = torch::randn({n, 2}, torch::kDouble);
  auto make = [] {
    torch::manual_seed(6);
    torch::nn::Sequential m(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                            torch::nn::Functional(torch::relu), torch::nn::Linear(4, 2));
    m->to(torch::kDouble);
    return m;
  };
  torch::nn::Sequential ref = make(), net = make();
  expect(kolo::convert_sync_batchnorm(*net) == 1, "convert_sync_batchnorm replaced one layer");
  expect(std::dynamic_pointer_cast<kolo::SyncBatchNormImpl>(net->ptr(1)) != nullptr,
         "the BatchNorm1d became a SyncBatchNorm");
  for (std::size_t i = 0; i < ref->parameters().size(); ++i) {
    expect_close(net->parameters()[i], ref->parameters()[i], 0, 0, "converted parameters");
  }
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  kolo::DistributedOptimizer opt(sgd, net->named_parameters(), {.name_prefix = "syncbn.train."});
  for (int step = 0; step < 3; ++step) {
    ref_opt.zero_grad();
    torch::mse_loss(ref->forward(x_all), t_all).backward();
    ref_opt.step();
    opt.zero_grad();
    const auto rows = x_all.slice(0, rank * per_rank, (rank + 1) * per_rank);
    torch::mse_loss(net->forward(rows), t_all.slice(0, rank * per_rank, (rank + 1) * per_rank))
        .backward();
    opt.step();
  }
  for (std::size_t i = 0; i < ref->parameters().size(); ++i) {
    expect_close(net->parameters()[i], ref->parameters()[i], 1e-9, 1e-10,
                 "parameter " + std::to_string(i) + " after 3 steps");
  }
}

// A BatchNorm in a field of a module of the user's own cannot be swapped: an error naming
// its path; one in a ModuleList can.
struct Custom : torch::nn::Module {
  Custom() {
    bn = register_module("bn", torch::nn::BatchNorm2d(2));
    list = register_module("list", torch::nn::ModuleList(torch::nn::BatchNorm1d(3)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn(x); }
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::ModuleList list{nullptr};
};

void check_conversion_limits() {
  torch::nn::Sequential outer(torch::nn::Linear(2, 2), Custom());
  expect_error([&] { kolo::convert_sync_batchnorm(*outer); }, "'1.bn'",
               "construct a kolo::SyncBatchNorm there");
  torch::nn::ModuleList list(torch::nn::Linear(2, 2), torch::nn::BatchNorm1d(2));
  expect(kolo::convert_sync_batchnorm(*list) == 1, "a ModuleList's BatchNorm is converted");
  expect(std::dynamic_pointer_cast<kolo::SyncBatchNormImpl>(list->ptr(1)) != nullptr,
         "the ModuleList holds the SyncBatchNorm");
  expect(std::dynamic_pointer_cast<kolo::SyncBatchNormImpl>(list->named_children()["1"]) != nullptr,
         "the ModuleList's registered child is the SyncBatchNorm");
}

}  // namespace

void check_sync_batch_norm() {
  check_layer<torch::nn::BatchNorm1d>({3}, "1d");
  check_layer<torch::nn::BatchNorm1d>({3, 5}, "1d_length");
  check_layer<torch::nn::BatchNorm2d>({2, 3, 4}, "2d");
  check_layer<torch::nn::BatchNorm3d>({2, 2, 3, 2}, "3d");
  check_training();
  check_conversion_limits();
  kolo::SyncBatchNorm bad(4);
  expect_error(
      [&] {
        bad->forward(torch::zeros({2, 3}));
      },
      "SyncBatchNorm 'syncbn.", "expected an input of shape (N, 4, ...)", "got (2, 3)");
}

}  // namespace kolo_test
