// The hand-written peer of kolo_train's fit for bench/fit_compare.sh: examples/keras_mnist.cc's
// model and training, written as the Horovod-style libtorch loop a user would write
// without fit (kolo::DistributedOptimizer, broadcast_parameters), under kolorun:
//
//   build/bin/kolorun -np 2 build/bin/mlp_loop [--epochs 1] [--steps-per-epoch N] [--batch-size 32]
//
// The same computation as `keras_mnist --strategy multiworker` at the same flags:
// Dense(64, relu, 784) + Dense(10) with Keras's initialisation drawn in the same order
// from the same seed (so both start from the same weights), Adam(lr, eps 1e-7), softmax
// cross-entropy from logits, a GLOBAL batch of --batch-size cut into one consecutive slice
// per worker (rank r takes its [r * b / n, (r + 1) * b / n) of every global batch, as fit
// does), the global order a randperm seeded with seed + epoch on every rank. Gradients
// are averaged (the mean loss over the worker's slice, kAverage), which is fit's sum over
// the slice / global batch with kSum. Per step it reads the loss and the number of
// correct predictions (.item(), as a loop that reports them does) and keeps them locally;
// they are summed over the workers once, after training. fit does more per step: exact
// global metrics (one small allreduce per step), Logs and callbacks; that is its own cost
// this program measures. --fit-metrics 1 adds fit's per-step metrics allreduce, to tell
// that part of fit's cost from the rest.
//
// images_per_sec is timed as keras_mnist times it: rank 0's wall time of each epoch's
// training (the epoch's permutation and the steps; not the start-up, not evaluation),
// images = every worker's images. Prints one JSON line on rank 0's stdout. Needs only
// kolo_torch. Not a test and not an example.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kolo/torch.h"

namespace {

struct Flags {
  int epochs = 1;
  std::int64_t steps_per_epoch = -1;  // -1: the whole data
  std::int64_t batch_size = 32;       // global
  double learning_rate = 0.001;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::uint64_t seed = 42;
  int threads = 0;  // 0: leave libtorch's default (kolorun's OMP_NUM_THREADS)
  // 1: also what fit adds per step for its exact global metrics: the step's metric
  // state (float64) allreduced, submitted before backward and waited for after the
  // optimizer step (fit.cc's train_step). For attributing fit's cost.
  bool fit_metrics = false;
};

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--epochs N] [--steps-per-epoch N] [--batch-size N (global)] "
               "[--learning-rate X] [--data DIR] [--seed N] [--threads N] [--fit-metrics 0|1]\n",
               argv0);
  return 2;
}

// Keras's Dense(64, relu, 784) + Dense(10): glorot-uniform weights, zero biases, drawn
// in the order kolo::train::Sequential draws them.
torch::nn::Sequential make_model() {
  torch::nn::Sequential seq;
  const std::int64_t sizes[] = {784, 64, 10};
  for (int i = 0; i < 2; ++i) {
    torch::nn::Linear linear(sizes[i], sizes[i + 1]);
    torch::NoGradGuard no_grad;
    torch::nn::init::xavier_uniform_(linear->weight);
    torch::nn::init::zeros_(linear->bias);
    seq->push_back(linear);
    if (i == 0) seq->push_back(torch::nn::ReLU());
  }
  return seq;
}

// Rank r's part of a global batch of n examples over `size` workers: as even as possible,
// the first n % size ranks one more (fit's split of a batch into replicas' slices).
std::pair<std::int64_t, std::int64_t> my_slice(std::int64_t n, int size, int rank) {
  const std::int64_t base = n / size, extra = n % size;
  const std::int64_t lo = rank * base + std::min<std::int64_t>(rank, extra);
  return {lo, lo + base + (rank < extra ? 1 : 0)};
}

int run(const Flags& f) {
  if (f.threads > 0) torch::set_num_threads(f.threads);
  kolo::init();
  const int rank = kolo::rank(), size = kolo::size();
  torch::manual_seed(static_cast<std::uint64_t>(f.seed));
  torch::nn::Sequential model = make_model();
  const kolo::IdxDataset train = kolo::load_idx_dataset(f.data + "/train-images-idx3-ubyte.gz",
                                                        f.data + "/train-labels-idx1-ubyte.gz", 10);
  const kolo::IdxDataset test = kolo::load_idx_dataset(f.data + "/t10k-images-idx3-ubyte.gz",
                                                       f.data + "/t10k-labels-idx1-ubyte.gz", 10);
  const torch::Tensor x = train.images.reshape({train.images.size(0), -1});
  const torch::Tensor y = train.labels;
  const std::int64_t examples = x.size(0);

  torch::optim::Adam adam(model->parameters(),
                          torch::optim::AdamOptions(f.learning_rate).eps(1e-7));
  kolo::DistributedOptimizer opt(adam, model->named_parameters());
  kolo::broadcast_parameters(model->named_parameters(), 0);

  double seconds = 0, loss_sum = 0, correct = 0, seen = 0;
  std::int64_t images = 0;
  for (int epoch = 0; epoch < f.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(f.seed + static_cast<std::uint64_t>(epoch));
    const torch::Tensor order = torch::randperm(examples, gen, torch::kLong);
    std::int64_t steps = (examples + f.batch_size - 1) / f.batch_size;
    if (f.steps_per_epoch >= 0) steps = std::min(steps, f.steps_per_epoch);
    for (std::int64_t s = 0; s < steps; ++s) {
      const std::int64_t lo = s * f.batch_size, n = std::min(examples, lo + f.batch_size) - lo;
      const auto [a, b] = my_slice(n, size, rank);
      const torch::Tensor idx = order.slice(0, lo + a, lo + b);
      const torch::Tensor xb = x.index_select(0, idx), yb = y.index_select(0, idx);
      opt.zero_grad();
      const torch::Tensor logits = model->forward(xb);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, yb);
      const double step_loss = loss.item<double>() * static_cast<double>(idx.numel());
      const double step_correct = logits.detach().argmax(1).eq(yb).sum().item<double>();
      std::optional<kolo::TorchHandle> metrics;
      if (f.fit_metrics) {
        metrics = kolo::allreduce_async(
            torch::tensor({step_loss, static_cast<double>(idx.numel()), step_correct, 0.0},
                          torch::kFloat64),
            {.name = "mlp_loop.metrics", .op = kolo::ReduceOp::kSum});
      }
      loss.backward();
      opt.step();
      if (metrics) (void)metrics->wait();
      loss_sum += step_loss;
      correct += step_correct;
      seen += static_cast<double>(idx.numel());
      images += n;
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  torch::Tensor totals = torch::tensor({loss_sum, correct, seen}, torch::kFloat64);
  totals = kolo::allreduce(totals, {.name = "mlp_loop.totals", .op = kolo::ReduceOp::kSum});
  double test_correct = 0;
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor tx = test.images.reshape({test.images.size(0), -1});
    for (std::int64_t lo = 0; lo < tx.size(0); lo += 1000) {
      const std::int64_t hi = std::min<std::int64_t>(tx.size(0), lo + 1000);
      test_correct += model->forward(tx.slice(0, lo, hi))
                          .argmax(1)
                          .eq(test.labels.slice(0, lo, hi))
                          .sum()
                          .item<double>();
    }
  }
  double parameter_sum = 0;
  for (const auto& p : model->parameters()) parameter_sum += p.abs().sum().item<double>();
  if (rank == 0) {
    const double n = std::max(totals[2].item<double>(), 1.0);
    const nlohmann::json summary = {
        {"program", "mlp_loop"},
        {"workers", size},
        {"threads", torch::get_num_threads()},
        {"epochs", f.epochs},
        {"train_loss", totals[0].item<double>() / n},
        {"train_accuracy", totals[1].item<double>() / n},
        {"test_accuracy", test_correct / static_cast<double>(test.labels.size(0))},
        {"parameter_sum", parameter_sum},
        {"images_per_sec", seconds > 0 ? static_cast<double>(images) / seconds : 0.0}};
    std::printf("%s\n", summary.dump().c_str());
    std::fflush(stdout);
  }
  kolo::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(argv[0]), 0;
    if (i + 1 >= argc) return usage(argv[0]);
    const std::string v = argv[++i];
    if (a == "--epochs")
      f.epochs = std::stoi(v);
    else if (a == "--steps-per-epoch")
      f.steps_per_epoch = std::stoll(v);
    else if (a == "--batch-size")
      f.batch_size = std::stoll(v);
    else if (a == "--learning-rate")
      f.learning_rate = std::stod(v);
    else if (a == "--data")
      f.data = v;
    else if (a == "--seed")
      f.seed = std::stoull(v);
    else if (a == "--threads")
      f.threads = std::stoi(v);
    else if (a == "--fit-metrics")
      f.fit_metrics = v == "1";
    else
      return usage(argv[0]);
  }
  if (f.epochs < 1 || f.batch_size < 1) return usage(argv[0]);
  try {
    return run(f);
  } catch (const kolo::Error& e) {
    std::fprintf(stderr, "mlp_loop: kolo error (%s): %s\n", kolo::error_code_name(e.code()),
                 e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_loop: error: %s\n", e.what());
  }
  return 1;
}
