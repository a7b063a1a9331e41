// Worker program of the libtorch adapter tests: run under kolorun with 2 or 3 workers,
// it checks each property against a single-process reference that every worker
// computes itself, and prints "<check> OK" or "<check> FAILED: why" per check.
//
// The defining property of data parallelism: N workers training on their shards of a
// batch end with the same parameters as one process training on the whole batch.
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>

#include "check.h"
#include "kolo/torch.h"
#include "tensor_checks.h"

namespace {

using kolo::DistributedOptimizer;
using kolo::DistributedOptimizerOptions;

using kolo_test::check_autograd_on;
using kolo_test::check_grad_scaler;
using kolo_test::check_process_sets;
using kolo_test::check_sync_batch_norm;
using kolo_test::check_tensor_op_corner_cases;
using kolo_test::check_tensor_ops;
using kolo_test::expect;
using kolo_test::expect_close;
using kolo_test::expect_error;
using kolo_test::run;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
    unused = register_parameter("unused", torch::ones({3}));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_extra = false) {
    auto h = torch::tanh(fc1(x));
    auto y = fc2(h);
    if (use_extra) y = y + unused.sum();
    return y;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::Tensor unused;
};
TORCH_MODULE(Net);

Net make_net(int seed) {
  torch::manual_seed(seed);
  Net net;
  net->to(torch::kDouble);
  return net;
}

// The global batch of step s: rows [r * per_rank, (r + 1) * per_rank) belong to rank r.
std::pair<torch::Tensor, torch::Tensor> global_batch(int step, int n, int per_rank) {
  torch::manual_seed(1000 + step);
  auto x = torch::randn({n * per_rank, 8}, torch::kDouble);
  auto y = torch::randn({n * per_rank, 4}, torch::kDouble);
  return {x, y};
}

using MakeOpt = std::function<std::unique_ptr<torch::optim::Optimizer>(Net&)>;

// Trains a distributed copy and a single-process reference for `steps` steps and
// compares the parameters. `local_loss` / `reference_loss` define the objective.
using BeforeStep = std::function<void(int step, Net& net)>;

void train_and_compare(const std::string& what, const MakeOpt& make_opt,
                       DistributedOptimizerOptions options, int steps, double rtol, double atol,
                       bool use_extra_on_rank0 = false, const BeforeStep& before_step = nullptr,
                       const torch::Device& device = torch::kCPU) {
  const int n = kolo::size(), rank = kolo::rank();
  const int per_rank = 6;
  Net net = make_net(1), ref = make_net(1);  // the reference always trains on the CPU
  net->to(device);
  auto opt = make_opt(net);
  auto ref_opt = make_opt(ref);
  options.name_prefix = what + ".";
  DistributedOptimizer dopt(*opt, net->named_parameters(), options);
  const int passes = options.backward_passes_per_step;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = global_batch(s, n, per_rank);
    if (before_step) {
      before_step(s, net);
      before_step(s, ref);
    }
    // Distributed: this rank's rows, split into `passes` micro-batches.
    dopt.zero_grad();
    auto mx = x.narrow(0, rank * per_rank, per_rank).to(device),
         my = y.narrow(0, rank * per_rank, per_rank).to(device);
    const int micro = per_rank / passes;
    for (int p = 0; p < passes; ++p) {
      auto px = mx.narrow(0, p * micro, micro), py = my.narrow(0, p * micro, micro);
      auto loss = torch::mse_loss(net->forward(px, use_extra_on_rank0 && rank == 0), py) / passes;
      loss.backward();
    }
    dopt.step();
    // Reference: the mean of the ranks' losses (average) or their sum (sum).
    ref_opt->zero_grad();
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    for (int r = 0; r < n; ++r) {
      auto rx = x.narrow(0, r * per_rank, per_rank), ry = y.narrow(0, r * per_rank, per_rank);
      total = total + torch::mse_loss(ref->forward(rx, use_extra_on_rank0 && r == 0), ry);
    }
    if (options.op == kolo::ReduceOp::kAverage) total = total / n;
    total.backward();
    ref_opt->step();
  }
  auto a = net->named_parameters();
  for (const auto& item : ref->named_parameters()) {
    expect_close(a[item.key()], item.value(), rtol, atol, what + " parameter " + item.key());
  }
}

MakeOpt sgd() {
  return [](Net& net) {
    return std::make_unique<torch::optim::SGD>(net->parameters(),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  };
}
MakeOpt adam() {
  return [](Net& net) {
    return std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
  };
}

void check_equivalence() {
  train_and_compare("sgd", sgd(), {}, 5, 1e-10, 1e-12);
  train_and_compare("adam", adam(), {}, 5, 1e-10, 1e-12);
}

void check_accumulation() {
  DistributedOptimizerOptions o;
  o.backward_passes_per_step = 2;
  train_and_compare("accumulate", sgd(), o, 4, 1e-10, 1e-12);
}

void check_sum_and_predivide() {
  DistributedOptimizerOptions sum;
  sum.op = kolo::ReduceOp::kSum;
  train_and_compare("sum", sgd(), sum, 3, 1e-10, 1e-12);
  DistributedOptimizerOptions pre;
  pre.gradient_predivide_factor = 4.0;
  train_and_compare("predivide", sgd(), pre, 3, 1e-10, 1e-12);
}

void check_compression() {
  // fp16 on the wire keeps about 3 decimal digits of each gradient; after a few SGD
  // steps parameters agree to ~1e-3 (stated tolerance: rtol 1e-2, atol 1e-3).
  DistributedOptimizerOptions o;
  o.compression = kolo::Compression::kFP16;
  train_and_compare("fp16", sgd(), o, 3, 1e-2, 1e-3);
  o.compression = kolo::Compression::kBF16;
  train_and_compare("bf16", sgd(), o, 3, 5e-2, 5e-3);
}

void check_unused_parameter() {
  // 'unused' gets a gradient only on rank 0; the others reduce zeros and nobody hangs.
  train_and_compare("unused", sgd(), {}, 3, 1e-10, 1e-12, /*use_extra_on_rank0=*/true);
}

void check_requires_grad_changes() {
  // fc1 is frozen in step 1 and trainable again in step 2: ranks neither hang nor diverge
  // from the reference, whose optimizer sees the same gradients.
  train_and_compare("freeze", sgd(), {}, 4, 1e-10, 1e-12, false, [](int step, Net& net) {
    net->fc1->weight.requires_grad_(step != 1);
    net->fc1->bias.requires_grad_(step != 1);
  });
}

void check_bad_names() {
  Net net = make_net(1);
  torch::optim::SGD opt(net->parameters(), 0.1);
  kolo::NamedTensors partial;
  partial.insert("fc1.weight", net->fc1->weight);
  expect_error([&] { DistributedOptimizer d(opt, partial, {}); }, "not among the named parameters");
  kolo::NamedTensors twice = net->named_parameters();
  twice.insert("alias", net->fc1->weight);  // one tensor under two names
  expect_error([&] { DistributedOptimizer d(opt, twice, {}); },
               "'alias' and 'fc1.weight' are the same tensor");
  kolo::NamedTensors empty_name;
  empty_name.insert("", net->fc1->weight);
  torch::optim::SGD one(std::vector<torch::Tensor>{net->fc1->weight}, 0.1);
  expect_error([&] { DistributedOptimizer d(one, empty_name, {}); }, "empty name");
  expect_error(
      [&] {
        DistributedOptimizer d(opt, net->named_parameters(),
                               {.op = kolo::ReduceOp::kSum, .gradient_predivide_factor = 2});
      },
      "gradient_predivide_factor", "op = average");
  kolo::NamedTensors derived = net->named_parameters();
  const torch::Tensor doubled = net->fc2->bias * 2;  // computed: no gradient accumulator
  derived.insert("doubled", doubled);
  expect_error([&] { DistributedOptimizer d(opt, derived, {}); }, "'doubled' is not a leaf tensor");
  // None of the refused optimizers left a hook behind: a plain backward still runs.
  auto [x, y] = global_batch(0, 1, 4);
  torch::mse_loss(net->forward(x), y).backward();
  expect(net->fc1->weight.grad().defined(), "backward after refused optimizers");
}

void check_overlap() {
  // Eight 512x512 layers: backward takes long enough that the last layer's gradient is
  // on the wire before backward ends.
  torch::manual_seed(3);
  torch::nn::Sequential model;
  for (int i = 0; i < 8; ++i) {
    model->push_back(torch::nn::Linear(512, 512));
    model->push_back(torch::nn::Tanh());
  }
  torch::optim::SGD opt(model->parameters(), 0.01);
  DistributedOptimizer dopt(opt, model->named_parameters(), {.name_prefix = "overlap."});
  auto x = torch::randn({256, 512});
  bool overlapped = false;  // on this rank, in any attempt so far
  bool everywhere = false;  // on every rank: the same on all ranks, so all stop together
  for (int attempt = 0; attempt < 5 && !everywhere; ++attempt) {
    dopt.zero_grad();
    model->forward(x).pow(2).mean().backward();
    const auto backward_end = kolo::Handle::Clock::now();
    dopt.step();
    for (const auto& t : dopt.last_times())
      overlapped = overlapped ||
                   (t.started != kolo::Handle::Clock::time_point{} && t.started < backward_end);
    everywhere = kolo::allreduce(torch::tensor({overlapped ? 1 : 0}),
                                 {.name = "overlap.everywhere", .op = kolo::ReduceOp::kMin})
                     .item<int>() == 1;
  }
  expect(overlapped, "no gradient allreduce started before backward finished");
}

void check_in_place_and_extra_backward() {
  // The reduced gradient lands in the very .grad tensor autograd accumulated (no copy),
  // and a backward pass beyond backward_passes_per_step before step() is refused with
  // a clear error instead of silently changing or dropping a gradient.
  const int rank = kolo::rank();
  Net net = make_net(5);
  auto [x, y] = global_batch(0, 4, 4);
  auto loss = [&] { return torch::mse_loss(net->forward(x * (rank + 1)), y); };
  // This rank's own gradient, taken before the optimizer hooks the parameters: once they
  // are hooked, .grad is reduced in place in the background as soon as backward
  // accumulates it, so a copy taken afterwards could already be (partly) averaged.
  loss().backward();
  const torch::Tensor mine = net->fc1->weight.grad().clone();
  for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
  torch::optim::SGD opt(net->parameters(), 0.1);
  DistributedOptimizer dopt(opt, net->named_parameters(), {.name_prefix = "inplace."});
  loss().backward();
  const void* grad_memory = net->fc1->weight.grad().data_ptr();
  // Thrown inside autograd, which may rethrow it as its own error type.
  expect_error<std::exception>([&] { loss().backward(); },
                               "more than backward_passes_per_step = 1");
  dopt.synchronize();
  expect(net->fc1->weight.grad().data_ptr() == grad_memory, "the reduced gradient is a new tensor");
  // One worker has nothing to average: no allreduce at all (as Horovod at size 1).
  expect((kolo::size() == 1) == dopt.last_times().empty(), "allreduces issued iff several workers");
  // Every rank's gradient is its input scaled by (rank + 1) in x: check the average
  // against the allreduce of the local gradients, computed separately.
  const torch::Tensor expected = kolo::allreduce(mine, {.name = "inplace.expected"});
  expect_close(net->fc1->weight.grad(), expected, 1e-12, 1e-14, "in-place average");
  dopt.step();  // usable after the refusal: the next step runs normally
  dopt.zero_grad();
  loss().backward();
  dopt.step();
}

// Parameters 'a' and 'b' under SGD, 'b' of a shape that differs on rank 1: a user error
// (different models on different ranks).
struct MismatchedPair {
  explicit MismatchedPair(int rank)
      : a(torch::randn({3}, torch::kDouble).requires_grad_()),
        b(torch::randn({rank == 1 ? 5 : 4}, torch::kDouble).requires_grad_()),
        opt(std::vector<torch::Tensor>{a, b}, 0.1) {
    named.insert("a", a);
    named.insert("b", b);
  }
  torch::Tensor a, b;
  kolo::NamedTensors named;
  torch::optim::SGD opt;
};

void check_mismatched_shapes() {
  // A user error: a parameter whose shape differs between ranks (different models).
  // step() fails on every rank with an error naming it; that .grad stays this rank's own
  // gradient, the other parameter's gradient is still averaged, nothing is updated, and
  // the next step starts clean (the same error again, not a consequence of the first).
  const int rank = kolo::rank(), n = kolo::size();
  MismatchedPair pair(rank);
  auto &a = pair.a, &b = pair.b;
  auto& named = pair.named;
  auto& opt = pair.opt;
  DistributedOptimizer dopt(opt, named, {.name_prefix = "mismatch."});
  const double scale = rank + 1;
  const torch::Tensor a_before = a.detach().clone(), b_before = b.detach().clone();
  for (int attempt = 0; attempt < 2; ++attempt) {
    dopt.zero_grad();
    ((a * scale).sum() + (b * scale).pow(2).sum()).backward();
    expect_error([&] { dopt.step(); }, "Mismatched shapes", "mismatch.b");
    expect_close(b.grad(), 2 * scale * scale * b.detach(), 1e-14, 0, "the failed tensor's .grad");
    expect_close(a.grad(), torch::full({3}, (n + 1) / 2.0, torch::kDouble), 1e-14, 0,
                 "the other parameter's average");
    expect(torch::equal(a.detach(), a_before) && torch::equal(b.detach(), b_before),
           "step() updated the parameters after a failed synchronize");
  }
}

// One SGD step of the single-process reference on the global batch of step `s` (the mean
// of the ranks' losses; rank 0's includes the 'unused' parameter).
void reference_step(Net& ref, torch::optim::Optimizer& ref_opt, int s, int per_rank) {
  const int n = kolo::size();
  auto [x, y] = global_batch(s, n, per_rank);
  ref_opt.zero_grad();
  torch::Tensor total = torch::zeros({}, torch::kDouble);
  for (int r = 0; r < n; ++r) {
    auto rx = x.narrow(0, r * per_rank, per_rank), ry = y.narrow(0, r * per_rank, per_rank);
    total = total + torch::mse_loss(ref->forward(rx, r == 0), ry);
  }
  (total / n).backward();
  ref_opt.step();
}

void check_skipped_steps() {
  // pytorch/examples' way of skipping a batch (say its loss is NaN): backward(), then
  // zero_grad() without step(), on every rank. The step's allreduces are discarded, the
  // next step runs normally, and training ends where a reference that never saw the
  // skipped batches ends. With two passes per step, step 1 skips after one pass (nothing
  // sent yet) and step 2 after both (everything sent). 'unused' gets a gradient on rank 0
  // only, so the other ranks must still submit it when they skip.
  const int rank = kolo::rank(), per_rank = 6;
  for (int passes : {1, 2}) {
    const std::string prefix = "skip" + std::to_string(passes) + ".";
    Net net = make_net(1), ref = make_net(1);
    const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
    torch::optim::SGD opt(net->parameters(), options), ref_opt(ref->parameters(), options);
    DistributedOptimizer dopt(opt, net->named_parameters(),
                              {.backward_passes_per_step = passes, .name_prefix = prefix});
    for (int s = 0; s < 5; ++s) {
      const bool skip = s == 1 || s == 2;  // two in a row
      const int run_passes = skip && s == 1 ? 1 : passes;
      auto [x, y] = global_batch(s, kolo::size(), per_rank);
      dopt.zero_grad();
      const int micro = per_rank / passes;
      for (int p = 0; p < run_passes; ++p) {
        auto px = x.narrow(0, rank * per_rank + p * micro, micro),
             py = y.narrow(0, rank * per_rank + p * micro, micro);
        (torch::mse_loss(net->forward(px, rank == 0), py) / passes).backward();
      }
      if (skip) {
        dopt.zero_grad();
        for (const auto& item : net->named_parameters()) {
          const torch::Tensor& g = item.value().grad();
          expect(!g.defined() || g.abs().max().item<double>() == 0,
                 "step " + std::to_string(s) + ": zero_grad() left a gradient in " + item.key());
        }
        continue;
      }
      dopt.step();
      reference_step(ref, ref_opt, s, per_rank);
    }
    auto a = net->named_parameters();
    for (const auto& item : ref->named_parameters()) {
      expect_close(a[item.key()], item.value(), 1e-10, 1e-12, prefix + " parameter " + item.key());
    }
  }
}

void check_skip_on_one_rank() {
  // A user error, documented: only the last rank skips step 1. Its allreduces still
  // complete (nobody hangs), the other ranks' step uses them (their parameters are the
  // reference's, which averaged every rank's gradient), the skipping rank did not update,
  // and the next step runs on every rank without an error.
  const int n = kolo::size(), rank = kolo::rank(), per_rank = 6;
  const bool skipper = rank == n - 1;
  Net net = make_net(1), ref = make_net(1);
  torch::optim::SGD opt(net->parameters(), 0.1), ref_opt(ref->parameters(), 0.1);
  DistributedOptimizer dopt(opt, net->named_parameters(), {.name_prefix = "skipone."});
  for (int s = 0; s < 2; ++s) {
    auto [x, y] = global_batch(s, n, per_rank);
    dopt.zero_grad();
    auto mx = x.narrow(0, rank * per_rank, per_rank), my = y.narrow(0, rank * per_rank, per_rank);
    torch::mse_loss(net->forward(mx, rank == 0), my).backward();
    reference_step(ref, ref_opt, s, per_rank);
    if (s == 1 && skipper) {
      const torch::Tensor before = net->fc1->weight.detach().clone();
      dopt.zero_grad();
      expect(torch::equal(net->fc1->weight.detach(), before), "the skipping rank updated");
      continue;
    }
    dopt.step();
    if (s == 1) {
      auto a = net->named_parameters();
      for (const auto& item : ref->named_parameters()) {
        expect_close(a[item.key()], item.value(), 1e-10, 1e-12, "stepping rank's " + item.key());
      }
    }
  }
  dopt.zero_grad();
  torch::mse_loss(net->forward(torch::ones({2, 8}, torch::kDouble)),
                  torch::zeros({2, 4}, torch::kDouble))
      .backward();
  dopt.step();
}

void check_skip_with_failed_reduction() {
  // Skipping a step whose reduction fails (a shape that differs between ranks): zero_grad()
  // says so on every rank, naming the tensor and itself; it still zeroes and resets, so
  // the same happens again next time (not "got a gradient after its allreduce started").
  const int rank = kolo::rank();
  MismatchedPair pair(rank);
  auto &a = pair.a, &b = pair.b;
  auto& named = pair.named;
  auto& opt = pair.opt;
  DistributedOptimizer dopt(opt, named, {.name_prefix = "skipfail."});
  for (int attempt = 0; attempt < 2; ++attempt) {
    (a.sum() + b.pow(2).sum()).backward();
    expect_error([&] { dopt.zero_grad(); }, "zero_grad() after backward() without step()",
                 "Mismatched shapes", "skipfail.b");
    expect(!a.grad().defined() || a.grad().abs().max().item<double>() == 0,
           "a failed zero_grad() left a gradient");
  }
}

void check_broadcasts() {
  const int rank = kolo::rank();
  Net net = make_net(100 + rank);  // different on every rank
  kolo::broadcast_parameters(net->named_parameters(), 0);
  Net root = make_net(100);
  for (const auto& item : root->named_parameters()) {
    expect(torch::equal(net->named_parameters()[item.key()], item.value()),
           "broadcast_parameters: " + item.key());
  }
  // Optimizer state: root has stepped (state) and uses lr 0.05; the others lr 0.5.
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(rank == 0 ? 0.05 : 0.5));
  if (rank == 0) {
    for (int i = 0; i < 2; ++i) {
      opt.zero_grad();
      net->forward(torch::ones({2, 8}, torch::kDouble)).sum().backward();
      opt.step();
    }
  }
  kolo::broadcast_optimizer_state(opt, 0);
  auto& options = static_cast<torch::optim::AdamOptions&>(opt.param_groups()[0].options());
  expect(options.lr() == 0.05, "learning rate not broadcast: " + std::to_string(options.lr()));
  torch::serialize::OutputArchive archive;
  opt.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  auto all =
      kolo::allgather_object(torch::IValue(static_cast<int64_t>(opt.state().size())), "state-size");
  for (const auto& v : all)
    expect(v.toInt() == all[0].toInt() && v.toInt() > 0, "optimizer state sizes differ");
  // Root without state: the others drop theirs (loading alone would only add to it).
  torch::optim::Adam fresh(net->parameters(), torch::optim::AdamOptions(0.01));
  if (rank != 0) {
    fresh.zero_grad();
    net->forward(torch::ones({2, 8}, torch::kDouble)).sum().backward();
    fresh.step();
  }
  kolo::broadcast_optimizer_state(fresh, 0);
  for (const auto& v :
       kolo::allgather_object(torch::IValue(static_cast<int64_t>(fresh.state().size())), "empty"))
    expect(v.toInt() == 0,
           "state left on a rank when root has none: " + std::to_string(v.toInt()) + " entries");
  // Objects.
  std::string msg =
      kolo::broadcast_object(rank == 0 ? std::string("hello from root\0!", 17) : "", 0, "bytes");
  expect(msg == std::string("hello from root\0!", 17), "broadcast_object bytes");
  auto gathered = kolo::allgather_object(std::string(rank + 1, 'a' + rank), "gather-bytes");
  for (int r = 0; r < kolo::size(); ++r)
    expect(gathered[r] == std::string(r + 1, 'a' + r), "allgather_object bytes");
  c10::Dict<std::string, int64_t> d;
  d.insert("epoch", 7 + rank);
  auto v = kolo::broadcast_object(torch::IValue(d), 0, "dict");
  expect(v.toGenericDict().at("epoch").toInt() == 7, "broadcast_object IValue");
}

void check_autograd() { check_autograd_on(torch::kCPU, "ag."); }

// CUDA tensors (host-staged, or on the device path in a kolo built with KOLO_DEVICE_PATH):
// run where a CUDA device exists, e.g. scripts/gpu_check.sh.
void check_cuda() {
  const int n = kolo::size(), rank = kolo::rank();
  if (rank == 0) {
    std::printf("cuda tensors: %s\n", kolo::has_device_path() ? "device path (NCCL, events)"
                                                              : "staged through host memory");
  }
  const torch::Device device = kolo::device();
  const auto count = static_cast<int>(torch::cuda::device_count());
  expect(device.is_cuda() && device.index() == kolo::local_rank() % count,
         "kolo::device() is cuda:<local_rank % devices>, got " + device.str());
  const auto on = torch::TensorOptions().device(device);
  torch::Tensor avg = kolo::allreduce(torch::full({4, 3}, rank + 1.0, on), {.name = "cuda.avg"});
  expect(avg.device() == device, "allreduce result on the input's device");
  expect_close(avg, torch::full({4, 3}, (n + 1) / 2.0), 1e-6, 1e-6, "cuda allreduce average");
  // In place into a non-contiguous CUDA tensor (a transposed view).
  torch::Tensor base = torch::arange(12, on.dtype(torch::kDouble)).reshape({3, 4}) * (rank + 1);
  torch::Tensor view = base.t();
  kolo::allreduce_(view, {.name = "cuda.inplace", .op = kolo::ReduceOp::kSum});
  expect_close(base, torch::arange(12, torch::kDouble).reshape({3, 4}) * (n * (n + 1) / 2), 1e-12,
               1e-12, "cuda in-place allreduce of a transposed view");
  torch::Tensor b = torch::full({5}, static_cast<float>(rank), on);
  kolo::broadcast_(b, {.name = "cuda.bcast", .root = n - 1});
  expect(b.device() == device, "broadcast_ keeps the device");
  expect_close(b, torch::full({5}, static_cast<float>(n - 1)), 0, 0, "cuda broadcast_");
  check_autograd_on(device, "cuda.ag.");
  // DistributedOptimizer with the model on the GPU against the CPU reference.
  train_and_compare("cuda_sgd", sgd(), {}, 3, 1e-9, 1e-11, false, nullptr, device);
  train_and_compare("cuda_adam", adam(), {}, 3, 1e-9, 1e-11, false, nullptr, device);
}

// kolo::device(choice), what the examples' --device takes: on a machine without CUDA the
// CUDA choices fail naming the choice and the rank; with CUDA they give the GPU asked for.
void check_device_choice() {
  const std::string rank = "on rank " + std::to_string(kolo::rank());
  expect(kolo::device("cpu") == torch::Device(torch::kCPU), "device(\"cpu\") is the CPU");
  expect(kolo::device("auto") == kolo::device(), "device(\"auto\") is device()");
  expect_error([] { kolo::device("gpu"); }, "device 'gpu' " + rank,
               "expected auto, cpu, cuda (cuda:<local rank>) or cuda:<index>");
  expect_error([] { kolo::device("cuda:x"); }, "device 'cuda:x' " + rank);
  const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (count == 0) {
    expect_error([] { kolo::device("cuda"); }, "device 'cuda' " + rank,
                 "this process sees no CUDA device", "use cpu");
    expect_error([] { kolo::device("cuda:0"); }, "device 'cuda:0' " + rank,
                 "this process sees no CUDA device");
    return;
  }
  expect(kolo::device("cuda") == torch::Device(torch::kCUDA, kolo::local_rank() % count),
         "device(\"cuda\") is cuda:<local_rank % devices>");
  expect(kolo::device("cuda:0") == torch::Device(torch::kCUDA, 0), "device(\"cuda:0\")");
  const std::string past = "cuda:" + std::to_string(count);
  expect_error([&] { kolo::device(past); }, "device '" + past + "' " + rank,
               "this process sees " + std::to_string(count) + " CUDA device");
  kolo::device();  // back to this rank's own GPU for the checks after this one
}

void check_optimizer_corner_cases() {
  const int n = kolo::size(), rank = kolo::rank();
  const double triangle = n * (n + 1) / 2.0;  // sum over ranks of (rank + 1)
  // Two parameters whose gradients autograd hands out as views of one buffer: each must
  // be reduced once (a sum reduced twice would be doubled).
  {
    auto plain_a = torch::zeros({2, 3}, torch::kDouble).requires_grad_(true);
    auto plain_b = torch::zeros({3, 2}, torch::kDouble).requires_grad_(true);
    const auto c = torch::arange(6, torch::kDouble) * (rank + 1);
    ((plain_a.reshape({6}) + plain_b.reshape({6})) * c).sum().backward();
    if (rank == 0) {
      std::printf("(plain libtorch gives a.grad and b.grad %s)\n",
                  plain_a.grad().data_ptr() == plain_b.grad().data_ptr() ? "one shared buffer"
                                                                         : "separate buffers");
    }
    // (Whether a doubled sum shows depends on whether the two land in one fused batch,
    // so the step is repeated.)
    for (int step = 0; step < 3; ++step) {
      auto a = torch::zeros({2, 3}, torch::kDouble).requires_grad_(true);
      auto b = torch::zeros({3, 2}, torch::kDouble).requires_grad_(true);
      torch::optim::SGD opt(std::vector<torch::Tensor>{a, b}, 1.0);
      kolo::NamedTensors named;
      named.insert("a", a);
      named.insert("b", b);
      DistributedOptimizer d(
          opt, named,
          {.op = kolo::ReduceOp::kSum, .name_prefix = "alias." + std::to_string(step) + "."});
      ((a.reshape({6}) + b.reshape({6})) * c).sum().backward();
      // An explicit synchronize() before step() (to clip, say) is not repeated by step().
      d.synchronize();
      const auto want = torch::arange(6, torch::kDouble) * triangle;
      expect_close(a.grad().reshape({6}), want, 1e-12, 1e-12, "summed gradient of a");
      expect_close(b.grad().reshape({6}), want, 1e-12, 1e-12, "summed gradient of b");
      expect(a.grad().data_ptr() != b.grad().data_ptr(), "a.grad and b.grad share memory");
      d.step();
      expect_close(a.reshape({6}), -want, 1e-12, 1e-12, "step() after synchronize() reduced again");
    }
  }
  // Sparse gradients: an error naming the parameter, or reduced dense on request.
  {
    torch::manual_seed(4);
    torch::nn::Embedding emb(torch::nn::EmbeddingOptions(6, 3).sparse(true));
    emb->to(torch::kDouble);
    torch::optim::SGD opt(emb->parameters(), 0.1);
    const auto idx = torch::tensor({rank, rank + 1}, torch::kLong);
    {
      DistributedOptimizer d(opt, emb->named_parameters(), {.name_prefix = "sparse."});
      expect_error<std::exception>([&] { emb->forward(idx).sum().backward(); }, "'weight'",
                                   "sparse_as_dense");
    }
    opt.zero_grad();
    DistributedOptimizer d(opt, emb->named_parameters(),
                           {.name_prefix = "dense.", .sparse_as_dense = true});
    emb->forward(idx).sum().backward();
    d.synchronize();
    torch::Tensor want = torch::zeros({6, 3}, torch::kDouble);
    for (int r = 0; r < n; ++r) {
      want[r] += 1.0 / n;
      want[r + 1] += 1.0 / n;
    }
    expect(!emb->weight.grad().is_sparse(), "sparse_as_dense leaves a dense .grad");
    expect_close(emb->weight.grad(), want, 1e-12, 1e-12, "sparse_as_dense average");
  }
}

}  // namespace

int main() {
  kolo::init();
  torch::set_num_threads(1);
  run("equivalence", check_equivalence);
  run("accumulation", check_accumulation);
  run("sum_and_predivide", check_sum_and_predivide);
  run("compression", check_compression);
  run("unused_parameter", check_unused_parameter);
  run("requires_grad_changes", check_requires_grad_changes);
  run("bad_names", check_bad_names);
  if (kolo::size() > 1) run("overlap", check_overlap);  // one worker sends nothing
  run("in_place_and_extra_backward", check_in_place_and_extra_backward);
  if (kolo::size() > 1) run("mismatched_shapes", check_mismatched_shapes);
  run("skipped_steps", check_skipped_steps);
  if (kolo::size() > 1) run("skip_on_one_rank", check_skip_on_one_rank);
  if (kolo::size() > 1) run("skip_with_failed_reduction", check_skip_with_failed_reduction);
  run("broadcasts", check_broadcasts);
  run("autograd", check_autograd);
  run("tensor_ops", check_tensor_ops);
  run("optimizer_corner_cases", check_optimizer_corner_cases);
  run("tensor_op_corner_cases", check_tensor_op_corner_cases);
  run("device_choice", check_device_choice);
  if (kolo::size() > 1) run("process_sets", check_process_sets);
  run("sync_batch_norm", check_sync_batch_norm);
  run("grad_scaler", check_grad_scaler);
  if (torch::cuda::is_available()) {
    run("cuda", check_cuda);
  } else {
    std::printf("cuda skipped: no CUDA device\n");
  }
  kolo::shutdown();
  return kolo_test::g_failed ? 1 : 0;
}
