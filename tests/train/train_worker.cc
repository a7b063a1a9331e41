// A worker of kolo_train's multi-process tests (run under kolorun, mpirun or TF_CONFIG).
//
//   kolo_train_worker equivalence [DEVICES]   MultiWorkerMirroredStrategy with DEVICES per
//                                             worker (default cpu:0) against one replica
//                                             trained in this process on the whole data
//
// Every check prints "<name> OK" or "FAILED: ..." (the CTest entries fail on FAILED).
#include <cstdio>
#include <sstream>

#include "kolo/kolo.h"
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

void equivalence(const std::vector<std::string>& devices) {
  kt::MultiWorkerMirroredStrategy strategy({}, devices);
  const int rank = kolo::rank();
  for (const kt::OptimizerSpec& opt :
       {kt::OptimizerSpec(kt::SGD{.learning_rate = 0.1, .momentum = 0.9}),
        kt::OptimizerSpec(kt::Adam{.learning_rate = 0.01})}) {
    const std::string name = kt::optimizer_name(opt);
    const Trained one = train(kt::Strategy(), opt);
    const Trained many = train(strategy, opt);
    CHECK(one.weights.size() == many.weights.size(), "%s: weight counts", name.c_str());
    double worst = 0;
    for (std::size_t i = 0; i < one.weights.size() && i < many.weights.size(); ++i) {
      worst = std::max(worst, (one.weights[i] - many.weights[i]).abs().max().item<double>());
    }
    CHECK(worst < 2e-5, "rank %d %s: %d workers x %zu replicas differ from one replica by %g", rank,
          name.c_str(), strategy.num_workers(), devices.size(), worst);
    const double dl = std::abs(*one.eval.get("loss") - *many.eval.get("loss"));
    const double da = std::abs(*one.eval.get("accuracy") - *many.eval.get("accuracy"));
    CHECK(dl < 1e-5 && da < 1e-9, "rank %d %s: evaluate gives loss %g acc %g, one replica %g %g",
          rank, name.c_str(), *many.eval.get("loss"), *many.eval.get("accuracy"),
          *one.eval.get("loss"), *one.eval.get("accuracy"));
    CHECK(many.predictions.sizes() == one.predictions.sizes() &&
              torch::allclose(many.predictions, one.predictions, 1e-4, 1e-5),
          "rank %d %s: predict differs from one replica's", rank, name.c_str());
    std::printf("rank %d: equivalence %s (%d workers x %zu replicas, max diff %.2g) %s\n", rank,
                name.c_str(), strategy.num_workers(), devices.size(), worst,
                g_failures ? "FAILED" : "OK");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "equivalence";
  try {
    if (mode == "equivalence") {
      equivalence(split(argc > 2 ? argv[2] : "cpu:0"));
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
