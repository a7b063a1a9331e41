// The consumer test's program (tests/consumer/CMakeLists.txt): trains a small regression
// model data-parallel with kolo::DistributedOptimizer, each rank on its own random data,
// and checks that the averaged loss fell and that every rank ends with the same weights.
// Prints "consumer OK" per rank; exits 1 on a failed check.
//
//   kolorun -np 2 consumer_train 2     (the argument: the number of ranks to expect)
#include <kolo/torch.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  kolo::init();
  const int expected = argc > 1 ? std::stoi(argv[1]) : 1;
  const int rank = kolo::rank();
  if (kolo::size() != expected) {
    std::printf("FAILED rank %d: size %d, expected %d\n", rank, kolo::size(), expected);
    return 1;
  }
  torch::manual_seed(100 + rank);  // different data and initial weights on every rank
  const torch::Tensor truth = torch::arange(1, 9, torch::kFloat32).reshape({8, 1}) / 8;
  const torch::Tensor x = torch::randn({256, 8});
  const torch::Tensor y = x.matmul(truth) + 0.01 * torch::randn({256, 1});

  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                              torch::nn::Linear(16, 1));
  kolo::broadcast_parameters(model->named_parameters(), 0);  // rank 0's start everywhere
  torch::optim::SGD sgd(model->parameters(), 0.05 * kolo::size());
  kolo::DistributedOptimizer opt(sgd, model->named_parameters());

  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    const float mean = kolo::allreduce(loss.detach()).item<float>();  // averaged over ranks
    if (step == 0) first = mean;
    last = mean;
  }
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().flatten());
  const torch::Tensor mine = torch::cat(flat).unsqueeze(0);
  const torch::Tensor all = kolo::allgather(mine);  // one row per rank
  bool ok = true;
  for (int r = 0; r < kolo::size(); ++r) {
    if (!torch::equal(all[r], all[0])) {
      std::printf("FAILED rank %d: rank %d's weights differ from rank 0's\n", rank, r);
      ok = false;
    }
  }
  if (!(last < 0.2 * first)) {
    std::printf("FAILED rank %d: loss %.5f -> %.5f did not fall below a fifth\n", rank, first,
                last);
    ok = false;
  }
  if (ok)
    std::printf("consumer OK rank %d of %d: loss %.5f -> %.5f\n", rank, kolo::size(), first, last);
  kolo::shutdown();
  return ok ? 0 : 1;
}
