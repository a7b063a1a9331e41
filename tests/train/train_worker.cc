// A worker of kolo_train's multi-process tests (run under kolorun, mpirun or TF_CONFIG).
//
//   kolo_train_worker equivalence [DEVICES]   MultiWorkerMirroredStrategy with DEVICES per
//                                             worker (default cpu:0; gpu:0 on a GPU machine,
//                                             scripts/gpu_check.sh) against one replica
//                                             trained in this process on the whole data, on
//                                             the first of DEVICES; then a custom loop
//                                             (custom_loop) the same way
//   kolo_train_worker horovod                 HorovodStrategy (averaged gradients, its own
//                                             loss scaling) against one replica, the same way
//
// Every check prints "<name> OK" or "FAILED: ..." (the CTest entries fail on FAILED).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "kolo/kolo.h"
#include "kolo/torch.h"
#include "kolo/train.h"
#include "train/testing/tiny_problem.h"

namespace kt = kolo::train;

namespace {

int g_failures = 0;

// libtorch's headers define glog's CHECK; this file's own replaces it. (#undef: with the
// precompiled <torch/torch.h>, cmake/torch_pch.cmake, GCC would warn of the redefinition.)
#undef CHECK
#define CHECK(cond, ...)                   \
  do {                                     \
    if (!(cond)) {                         \
      std::printf("FAILED: " __VA_ARGS__); \
      std::printf("\n");                   \
      ++g_failures;                        \
    }                                      \
  } while (0)

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

struct Trained {
  std::vector<torch::Tensor> weights;
  kt::Logs eval;
  torch::Tensor predictions;
};

Trained train(kt::Strategy strategy, const kt::OptimizerSpec& opt) {
  const auto p = kt::testing::tiny_problem();
  kt::Model model(kt::testing::tiny_net(), strategy);
  model.compile(opt, std::make_shared<kt::SparseCategoricalCrossentropy>(true), {"accuracy"});
  // 96 examples, global batch 16: 6 steps per epoch, every replica 4 or 8 examples.
  model.fit(p.x, p.y, {.epochs = 3, .batch_size = 16, .verbose = 0, .shuffle = true});
  Trained t;
  for (const auto& [name, w] : model.get_weights()) t.weights.push_back(w);
  // An uneven evaluation: batch 10 over the replicas, a partial last batch.
  t.eval = model.evaluate(p.x, p.y, {.batch_size = 10, .verbose = 0});
  t.predictions = model.predict(p.x, {.batch_size = 12});
  return t;
}

// fit with `strategy` over the job's workers takes the steps of one replica trained in
// this process on the whole data: the same weights, evaluation and predictions.
// The reference is one replica on the strategy's first device (a GPU's kernels round
// differently from the CPU's); results are compared on the CPU.
void equivalence(const kt::Strategy& strategy) {
  const int rank = kolo::rank();
  const int replicas = strategy.num_local_replicas();
  const torch::Device first = strategy.devices().front();
  const kt::Strategy reference =
      first.is_cuda() ? kt::Strategy(kt::OneDeviceStrategy(first.str())) : kt::Strategy();
  for (const kt::OptimizerSpec& opt :
       {kt::OptimizerSpec(kt::SGD{.learning_rate = 0.1, .momentum = 0.9}),
        kt::OptimizerSpec(kt::Adam{.learning_rate = 0.01})}) {
    const std::string name = kt::optimizer_name(opt);
    const Trained one = train(reference, opt);
    const Trained many = train(strategy, opt);
    CHECK(one.weights.size() == many.weights.size(), "%s: weight counts", name.c_str());
    double worst = 0;
    for (std::size_t i = 0; i < one.weights.size() && i < many.weights.size(); ++i) {
      worst = std::max(worst,
                       (one.weights[i].cpu() - many.weights[i].cpu()).abs().max().item<double>());
    }
    CHECK(worst < 2e-5, "rank %d %s %s: %d workers x %d replicas differ from one replica by %g",
          rank, strategy.name().c_str(), name.c_str(), strategy.num_workers(), replicas, worst);
    const double dl = std::abs(*one.eval.get("loss") - *many.eval.get("loss"));
    const double da = std::abs(*one.eval.get("accuracy") - *many.eval.get("accuracy"));
    CHECK(dl < 1e-5 && da < 1e-9, "rank %d %s: evaluate gives loss %g acc %g, one replica %g %g",
          rank, name.c_str(), *many.eval.get("loss"), *many.eval.get("accuracy"),
          *one.eval.get("loss"), *one.eval.get("accuracy"));
    CHECK(many.predictions.sizes() == one.predictions.sizes() &&
              torch::allclose(many.predictions.cpu(), one.predictions.cpu(), 1e-4, 1e-5),
          "rank %d %s: predict differs from one replica's", rank, name.c_str());
    std::printf("rank %d: equivalence %s %s (%d workers x %d replicas, max diff %.2g) %s\n", rank,
                strategy.name().c_str(), name.c_str(), strategy.num_workers(), replicas, worst,
                g_failures ? "FAILED" : "OK");
  }
}

// A custom loop (Strategy::replicate, compute_average_loss, all_reduce_gradients) over
// the job's workers and replicas takes the steps of one model on the global batches; its
// CheckpointManager writes on the chief only, and every worker restores the same state.
void custom_loop(const std::vector<std::string>& devices) {
  kt::MultiWorkerMirroredStrategy strategy({}, devices);
  const int rank = kolo::rank();
  const auto p = kt::testing::tiny_problem();
  const kt::SparseCategoricalCrossentropy loss(/*from_logits=*/true);
  torch::manual_seed(rank + 10);  // different on each worker: replicate() broadcasts the chief's
  torch::nn::Linear net(p.x.size(1), 4);
  std::vector<torch::nn::Linear> models = strategy.replicate(net);
  torch::manual_seed(10);  // the chief's
  torch::nn::Linear ref(p.x.size(1), 4);
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  for (auto& m : models) {
    optimizers.push_back(
        std::make_unique<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.2)));
  }
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.2));
  kt::DistributedDataset data = strategy.distribute(kt::Dataset::from_tensors(p.x, p.y), 16);
  for (std::int64_t step = 0; step < data.steps(); ++step) {
    const kt::DistributedBatch b = data.batch(step);
    strategy.run([&](const kt::ReplicaContext& c) {
      auto& m = models[static_cast<std::size_t>(c.local_replica_id)];
      m->zero_grad();
      const auto l = kt::compute_average_loss(
          loss.per_example(m->forward(b.x[c.local_replica_id]), b.y[c.local_replica_id]), c);
      l.backward();
      return l.detach();
    });
    strategy.all_reduce_gradients(models);
    for (auto& o : optimizers) o->step();
    ref_opt.zero_grad();
    const auto rows = torch::arange(step * 16, std::min<std::int64_t>(step * 16 + 16, p.x.size(0)));
    loss.per_example(ref->forward(p.x.index_select(0, rows)), p.y.index_select(0, rows))
        .mean()
        .backward();
    ref_opt.step();
  }
  double worst = 0;
  for (const auto& m : models) {
    worst = std::max(worst, (m->weight.cpu() - ref->weight).abs().max().item<double>());
    worst = std::max(worst, (m->bias.cpu() - ref->bias).abs().max().item<double>());
  }
  CHECK(worst < 1e-5,
        "rank %d: the custom loop (%d workers x %zu replicas) differs from one "
        "model by %g",
        rank, strategy.num_workers(), devices.size(), worst);
  // Checkpoints: the chief writes, every worker counts and restores.
  const std::string dir =
      "/tmp/kolo-train-worker-ckpt-" +
      kolo::broadcast_object(std::to_string(::getpid()), 0, "custom_loop.ckpt_dir");
  kt::Checkpoint ckpt;
  ckpt.track("model", models[0]);
  kt::CheckpointManager manager(ckpt, dir, 1);
  const std::string saved = manager.save();
  kolo::barrier();
  const torch::Tensor trained = models[0]->weight.detach().clone();
  {
    torch::NoGradGuard no_grad;
    models[0]->weight.zero_();
  }
  ckpt.restore(saved);
  CHECK(torch::equal(models[0]->weight, trained), "rank %d: the restored weights differ", rank);
  CHECK(saved == dir + "/ckpt-1", "rank %d: saved as %s", rank, saved.c_str());
  kolo::barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
  std::printf("rank %d: custom loop (%d workers x %zu replicas, max diff %.2g) %s\n", rank,
              strategy.num_workers(), devices.size(), worst, g_failures ? "FAILED" : "OK");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "equivalence";
  try {
    if (mode == "equivalence") {
      const std::vector<std::string> devices = split(argc > 2 ? argv[2] : "cpu:0");
      equivalence(kt::MultiWorkerMirroredStrategy({}, devices));
      custom_loop(devices);
    } else if (mode == "horovod") {
      equivalence(kt::HorovodStrategy());
    } else {
      std::printf("FAILED: unknown mode %s\n", mode.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  if (kolo::is_initialized()) kolo::shutdown();
  return g_failures ? 1 : 0;
}
