// The installed kolo::train used from outside kolo's tree: Keras's workflow on two CPU
// replicas in one process; prints "consumer fit OK" when the model learned.
#include <cstdio>

#include <kolo/train.h>

int main() {
  namespace kt = kolo::train;
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({256, 4});
  const torch::Tensor y = (x.sum(1) > 0).to(torch::kLong);
  kt::MirroredStrategy strategy({"cpu:0", "cpu:1"});
  kt::Model model(kt::Sequential({kt::Dense(8, "relu", 4), kt::Dense(2)}), strategy);
  model.compile(kt::Adam{.learning_rate = 0.01},
                std::make_shared<kt::SparseCategoricalCrossentropy>(true), {"accuracy"});
  model.fit(x, y, {.epochs = 20, .batch_size = 32, .verbose = 0});
  const double accuracy = *model.evaluate(x, y, {.verbose = 0}).get("accuracy");
  std::printf("consumer fit %s (accuracy %.3f)\n", accuracy > 0.9 ? "OK" : "FAILED", accuracy);
  return accuracy > 0.9 ? 0 : 1;
}
