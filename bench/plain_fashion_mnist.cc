// Plain libtorch Fashion-MNIST training, one process, no kolo runtime: the baseline of
// bench/train_bench.sh for kolo's overhead on one worker (kolo1/plain).
//
//   build/bin/plain_fashion_mnist --epochs 1 --max-steps 300 [--summary-json PATH]
//                                 [--device cpu|cuda|cuda:N]
//
// --device: where the model and the data live (default cpu), as fashion_mnist's --device;
// on a GPU it is the baseline of kolo's per-step overhead (scripts/gpu_check.sh).
//
// Same model, data, batch size, optimizer, seed, shuffle and training loop as
// examples/fashion_mnist.cc, with torch::optim::Adam used directly instead of
// kolo::DistributedOptimizer and without kolo::init(). From kolo_torch it uses only the
// IDX loader and the DistributedSampler (with one replica), plain functions that do not
// touch the runtime. images_per_sec is measured as in the example: images of the
// training loop / wall time of the training loop (no data loading, no evaluation).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "fashion_mnist_model.h"
#include "kolo/torch.h"

namespace {

struct Flags {
  int epochs = 1;
  std::int64_t batch_size = 64;
  std::string data = "/usr/share/datasets/fashion-mnist";
  int threads = 1;
  std::string summary_json;
  std::uint64_t seed = 42;
  std::int64_t max_steps = 0;  // per epoch; 0 = no limit
  std::string device = "cpu";  // torch's device syntax: cpu, cuda, cuda:N
};

using kolo_examples::Net;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--epochs N] [--batch-size N] [--data DIR] [--threads N] "
               "[--max-steps N] [--seed N] [--summary-json PATH] [--device cpu|cuda|cuda:N]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(argv[0]), 0;
    if (a == "--no-progress") continue;  // accepted for symmetry with fashion_mnist
    if (i + 1 >= argc) return usage(argv[0]);
    const std::string v = argv[++i];
    if (a == "--epochs")
      flags.epochs = std::stoi(v);
    else if (a == "--batch-size")
      flags.batch_size = std::stoll(v);
    else if (a == "--data")
      flags.data = v;
    else if (a == "--threads")
      flags.threads = std::stoi(v);
    else if (a == "--max-steps")
      flags.max_steps = std::stoll(v);
    else if (a == "--seed")
      flags.seed = std::stoull(v);
    else if (a == "--summary-json")
      flags.summary_json = v;
    else if (a == "--device")
      flags.device = v;
    else
      return usage(argv[0]);
  }
  if (flags.batch_size < 1 || flags.threads < 1 || flags.epochs < 1) return usage(argv[0]);

  try {
    torch::manual_seed(flags.seed);
    torch::set_num_threads(flags.threads);
    torch::Device device(torch::kCPU);
    try {
      device = torch::Device(flags.device);
    } catch (const c10::Error&) {
      std::fprintf(stderr, "plain_fashion_mnist: --device %s: use cpu, cuda or cuda:N\n",
                   flags.device.c_str());
      return 2;
    }
    if (device.is_cuda() &&
        std::max<int>(device.index(), 0) >= static_cast<int>(torch::cuda::device_count())) {
      std::fprintf(stderr, "plain_fashion_mnist: --device %s: this process sees %d CUDA devices\n",
                   flags.device.c_str(), static_cast<int>(torch::cuda::device_count()));
      return 1;
    }
    const torch::Tensor train_images =
        kolo::load_idx_images(flags.data + "/train-images-idx3-ubyte.gz").to(device);
    const torch::Tensor train_labels =
        kolo::load_idx_labels(flags.data + "/train-labels-idx1-ubyte.gz").to(device);
    const torch::Tensor test_images =
        kolo::load_idx_images(flags.data + "/t10k-images-idx3-ubyte.gz").to(device);
    const torch::Tensor test_labels =
        kolo::load_idx_labels(flags.data + "/t10k-labels-idx1-ubyte.gz").to(device);

    Net model;
    model->to(device);
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
    kolo::DistributedSampler sampler(train_labels.size(0), 1, 0, /*shuffle=*/true, flags.seed,
                                     /*drop_last=*/true);
    double accuracy = 0, mean_loss = 0, images_per_sec_sum = 0;
    for (int epoch = 0; epoch < flags.epochs; ++epoch) {
      sampler.set_epoch(epoch);
      const torch::Tensor order = torch::tensor(sampler.indices(), torch::kInt64).to(device);
      std::int64_t steps = (order.size(0) + flags.batch_size - 1) / flags.batch_size;
      if (flags.max_steps > 0) steps = std::min(steps, flags.max_steps);

      const auto start = std::chrono::steady_clock::now();
      double loss_sum = 0;
      std::int64_t images = 0;
      for (std::int64_t step = 0; step < steps; ++step) {
        const torch::Tensor batch =
            order.slice(0, step * flags.batch_size, (step + 1) * flags.batch_size);
        adam.zero_grad();
        const torch::Tensor loss =
            torch::nll_loss(model->forward(train_images.index_select(0, batch)),
                            train_labels.index_select(0, batch));
        loss.backward();
        adam.step();
        loss_sum += loss.item<double>();
        images += batch.size(0);
      }
      const double train_seconds = seconds_since(start);
      mean_loss = loss_sum / static_cast<double>(std::max<std::int64_t>(steps, 1));
      const double images_per_sec = static_cast<double>(images) / train_seconds;
      images_per_sec_sum += images_per_sec;

      {  // test accuracy, as the example computes it (batches of 1000, no grad)
        torch::NoGradGuard no_grad;
        model->eval();
        std::int64_t correct = 0;
        const torch::Tensor idx =
            torch::arange(test_labels.size(0), torch::TensorOptions(torch::kInt64).device(device));
        for (const torch::Tensor& b : idx.split(1000)) {
          const torch::Tensor pred = model->forward(test_images.index_select(0, b)).argmax(1);
          correct += pred.eq(test_labels.index_select(0, b)).sum().item<std::int64_t>();
        }
        model->train();
        accuracy = static_cast<double>(correct) / static_cast<double>(test_labels.size(0));
      }
      std::printf("epoch %d/%d train_loss %.4f test_accuracy %.4f images_per_sec %.0f\n", epoch + 1,
                  flags.epochs, mean_loss, accuracy, images_per_sec);
      std::fflush(stdout);
    }
    if (!flags.summary_json.empty()) {
      std::ofstream out(flags.summary_json);
      out << "{\"world_size\": 1, \"epochs\": " << flags.epochs
          << ", \"test_accuracy\": " << accuracy << ", \"train_loss\": " << mean_loss
          << ", \"images_per_sec\": " << images_per_sec_sum / flags.epochs << "}\n";
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", flags.summary_json.c_str());
        return 1;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
