// Tensor-level checks of the libtorch adapter's worker (tensor_checks.h), against
// references every worker computes itself.
#include "tensor_checks.h"

#include <functional>
#include <sstream>

#include "check.h"
#include "kolo/torch.h"

namespace kolo_test {

void check_autograd_on(const torch::Device& device, const std::string& prefix) {
  const int n = kolo::size(), rank = kolo::rank();
  const auto on = torch::TensorOptions().dtype(torch::kDouble).device(device);
  // y = allreduce(x, sum); loss_r = sum(c_r * y); the total loss sum_r loss_r gives
  // dx_r = sum_k c_k, which the backward allreduce must produce.
  auto c = [](int r) { return torch::arange(4, torch::kDouble) + r; };
  torch::Tensor sum_c = torch::zeros({4}, torch::kDouble);
  for (int r = 0; r < n; ++r) sum_c += c(r);
  auto x = torch::ones({4}, on).requires_grad_(true);
  (kolo::allreduce(x, {.name = prefix + "x", .op = kolo::ReduceOp::kSum}) * c(rank).to(device))
      .sum()
      .backward();
  expect_close(x.grad(), sum_c, 1e-12, 1e-12, "allreduce gradient");
  // allgather: y = concat(x_r) with rank r contributing r + 1 rows; the gradient is this
  // rank's rows of the average over ranks of d loss_k / dy (Horovod's convention).
  auto xg = torch::ones({rank + 1, 2}, on).requires_grad_(true);
  auto yg = kolo::allgather(xg, {.name = prefix + "gather"});
  expect(yg.device() == device, "allgather result on the input's device");
  const int64_t rows = yg.size(0);
  auto cg = [&](int r) {
    return torch::arange(rows * 2, torch::kDouble).reshape({rows, 2}) * (r + 1);
  };
  (yg * cg(rank).to(device)).sum().backward();
  torch::Tensor avg = torch::zeros({rows, 2}, torch::kDouble);
  for (int r = 0; r < n; ++r) avg += cg(r) / n;
  expect_close(xg.grad(), avg.narrow(0, rank * (rank + 1) / 2, rank + 1), 1e-12, 1e-12,
               "allgather gradient");
  // broadcast from root 0: the root's gradient is the average of the ranks' gradients,
  // the others' zero.
  auto xb = torch::ones({3}, on).requires_grad_(true);
  (kolo::broadcast(xb, {.name = prefix + "bcast", .root = 0}) * (rank + 1.0)).sum().backward();
  const double want = rank == 0 ? (n + 1) / 2.0 : 0.0;
  expect_close(xb.grad(), torch::full({3}, want, torch::kDouble), 1e-12, 1e-12,
               "broadcast gradient");
}

void check_tensor_ops() {
  const int n = kolo::size(), rank = kolo::rank();
  // Non-contiguous input (a transpose) and every dtype kolo supports.
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kChar,
                     torch::kByte, torch::kInt, torch::kLong}) {
    auto base = (torch::arange(12) % 5).reshape({3, 4}).to(dtype);
    auto t = base.t();  // non-contiguous view
    auto r = kolo::allreduce(
        t, {.name = std::string("ops.sum.") + c10::toString(dtype), .op = kolo::ReduceOp::kSum});
    expect(torch::equal(r, (t.to(torch::kLong) * n).to(dtype)),
           std::string("allreduce of ") + c10::toString(dtype));
    auto in_place = base.t();
    kolo::allreduce_(in_place, {.name = std::string("ops.max.") + c10::toString(dtype),
                                .op = kolo::ReduceOp::kMax});
    expect(torch::equal(in_place, t), "in-place allreduce max");
    expect(torch::equal(base.t(), in_place), "in-place allreduce writes through the view");
  }
  auto b = torch::full({5}, static_cast<double>(rank));
  kolo::broadcast_(b, {.name = "ops.bcast", .root = n - 1});
  expect(torch::equal(b, torch::full({5}, static_cast<double>(n - 1))), "broadcast_");
  auto g = kolo::allgather(torch::full({rank + 1, 2}, rank, torch::kInt));
  expect(g.size(0) == n * (n + 1) / 2 && g[g.size(0) - 1][0].item<int>() == n - 1, "allgather");
  std::vector<int64_t> splits(n, 1);
  auto a2a = kolo::alltoall(torch::arange(n).to(torch::kLong) + 10 * rank,
                            {.name = "ops.a2a", .splits = splits});
  for (int r = 0; r < n; ++r) expect(a2a.output[r].item<int64_t>() == 10 * r + rank, "alltoall");
  auto rs = kolo::reducescatter(torch::ones({2 * n + 1, 3}),
                                {.name = "ops.rs", .op = kolo::ReduceOp::kSum});
  expect(rs.size(0) == 2 + (rank < 1 ? 1 : 0) && rs[0][0].item<float>() == n, "reducescatter");
  auto grouped =
      kolo::grouped_allreduce({torch::ones({2}, torch::kDouble), torch::ones({3}, torch::kDouble)},
                              {.name = "ops.group", .op = kolo::ReduceOp::kSum});
  expect(grouped[1][2].item<double>() == n, "grouped allreduce");
  auto h =
      kolo::allreduce_async(torch::ones({4}), {.name = "ops.async", .op = kolo::ReduceOp::kSum});
  expect(h.wait()[3].item<float>() == n, "allreduce_async");
}

void check_tensor_op_corner_cases() {
  const int n = kolo::size(), rank = kolo::rank();
  // Copies of a handle share its result.
  kolo::TorchHandle h = kolo::allgather_async(torch::full({2}, rank), {.name = "corner.gather"});
  kolo::TorchHandle copy = h;
  const torch::Tensor first = h.wait(), second = copy.wait();
  expect(second.sizes() == first.sizes() && torch::equal(first, second) && first.size(0) == 2 * n,
         "a copied allgather handle returns the same result");
  // The differentiable allreduce honours compression like the plain one.
  const auto x = torch::full({3}, 1.0001 + 0.0001 * rank, torch::kFloat);
  const auto plain =
      kolo::allreduce(x, {.name = "corner.fp16", .compression = kolo::Compression::kFP16});
  const auto graph =
      kolo::allreduce(x.clone().requires_grad_(true),
                      {.name = "corner.fp16g", .compression = kolo::Compression::kFP16});
  expect(torch::equal(plain, graph.detach()), "a tensor that requires grad is compressed too");
  // In-place collectives count as in-place writes for autograd.
  auto w = torch::full({3}, rank + 1.0, torch::kDouble).requires_grad_(true);
  auto y = (w * w).sum();
  kolo::broadcast_(w, {.name = "corner.bcast", .root = 0});
  expect_error<std::exception>([&] { y.backward(); }, "inplace operation");
  // An unsupported dtype names the tensor.
  expect_error(
      [&] { kolo::allreduce(torch::ones({2}, torch::kComplexFloat), {.name = "corner.complex"}); },
      "'corner.complex'", "ComplexFloat");
  // grouped_allreduce is differentiable: each input gets the average of the ranks'
  // gradients of its output; an output that does not reach the loss gives zeros.
  std::vector<torch::Tensor> xs = {torch::ones({2}, torch::kDouble).requires_grad_(true),
                                   torch::ones({3}, torch::kDouble).requires_grad_(true)};
  auto outs = kolo::grouped_allreduce(xs, {.name = "corner.group"});
  expect(outs[0].requires_grad() && outs[1].requires_grad(), "grouped outputs require grad");
  ((outs[0] * (rank + 1)).sum() + (outs[1] * 2 * (rank + 1)).sum()).backward();
  expect_close(xs[0].grad(), torch::full({2}, (n + 1) / 2.0, torch::kDouble), 1e-12, 1e-12,
               "grouped allreduce gradient 0");
  expect_close(xs[1].grad(), torch::full({3}, n + 1.0, torch::kDouble), 1e-12, 1e-12,
               "grouped allreduce gradient 1");
  for (auto& t : xs) t.mutable_grad() = torch::Tensor();
  outs = kolo::grouped_allreduce(xs, {.name = "corner.group.half"});
  (outs[0] * (rank + 1)).sum().backward();
  expect_close(xs[1].grad(), torch::zeros({3}, torch::kDouble), 0, 0, "unused grouped output");
}

}  // namespace kolo_test
