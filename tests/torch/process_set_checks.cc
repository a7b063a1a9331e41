// The libtorch adapter on a process set (torch_worker.cc runs it at 2 and 3 workers): the
// set is every rank but 0, so an operation that fell back to the global set would wait
// for rank 0 (a stall, then an error), and a root or an offset read as a rank of the set
// would pick another member. Checks autograd through allreduce, grouped allreduce,
// allgather and broadcast, DistributedOptimizer against a single-process reference of the
// set's members, and the object broadcasts.
#include <string>
#include <vector>

#include "check.h"
#include "tensor_checks.h"

namespace kolo_test {
namespace {

// The set's members train one model: the same as one process on their rows of the batch.
void check_optimizer_on(const kolo::ProcessSet& set) {
  const int m = set.size(), me = set.rank();
  const int per_rank = 4;
  torch::manual_seed(7);
  torch::nn::Linear net(3, 2), ref(3, 2);
  net->to(torch::kDouble);
  ref->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < net->parameters().size(); ++i) {
      ref->parameters()[i].copy_(net->parameters()[i]);
    }
  }
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_sgd(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  kolo::DistributedOptimizerOptions o;
  o.process_set = set.id();
  o.name_prefix = "set.grad.";
  kolo::DistributedOptimizer opt(sgd, *net, o);
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(100 + step);
    auto x = torch::randn({m * per_rank, 3}, torch::kDouble);
    auto y = torch::randn({m * per_rank, 2}, torch::kDouble);
    opt.zero_grad();
    torch::mse_loss(net(x.narrow(0, me * per_rank, per_rank)), y.narrow(0, me * per_rank, per_rank))
        .backward();
    opt.step();
    ref_sgd.zero_grad();
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    for (int r = 0; r < m; ++r) {
      total = total + torch::mse_loss(ref(x.narrow(0, r * per_rank, per_rank)),
                                      y.narrow(0, r * per_rank, per_rank));
    }
    (total / m).backward();  // kAverage divides by the set's size
    ref_sgd.step();
  }
  for (std::size_t i = 0; i < ref->parameters().size(); ++i) {
    expect_close(net->parameters()[i], ref->parameters()[i], 1e-10, 1e-12,
                 "DistributedOptimizer on process set " + std::to_string(set.id()));
  }
}

void check_autograd_in(const kolo::ProcessSet& set) {
  const int m = set.size(), me = set.rank(), rank = kolo::rank();
  const std::vector<int>& ranks = set.ranks();
  const int id = set.id();
  auto c = [](int r) { return torch::arange(4, torch::kDouble) + r; };
  torch::Tensor sum_c = torch::zeros({4}, torch::kDouble);
  for (int r : ranks) sum_c += c(r);
  auto x = torch::ones({4}, torch::kDouble).requires_grad_(true);
  (kolo::allreduce(x, {.name = "set.x", .op = kolo::ReduceOp::kSum, .process_set = id}) * c(rank))
      .sum()
      .backward();
  expect_close(x.grad(), sum_c, 1e-12, 1e-12, "allreduce gradient on the set");
  auto g1 = torch::ones({2}, torch::kDouble).requires_grad_(true);
  auto g2 = torch::ones({3}, torch::kDouble).requires_grad_(true);
  auto ys = kolo::grouped_allreduce(
      {g1, g2}, {.name = "set.group", .op = kolo::ReduceOp::kSum, .process_set = id});
  ((ys[0].sum() + ys[1].sum()) * (rank + 1.0)).backward();
  double members = 0;
  for (int r : ranks) members += r + 1.0;
  expect_close(g2.grad(), torch::full({3}, members, torch::kDouble), 1e-12, 1e-12,
               "grouped allreduce gradient on the set");
  // allgather: set rank i sends i + 1 rows; the gradient is this member's rows of the
  // members' average.
  auto xg = torch::ones({me + 1, 2}, torch::kDouble).requires_grad_(true);
  auto yg = kolo::allgather(xg, {.name = "set.gather", .process_set = id});
  const int64_t rows = yg.size(0);
  expect(rows == m * (m + 1) / 2, "allgather on the set gathers the members' rows");
  auto cg = [&](int r) {
    return torch::arange(rows * 2, torch::kDouble).reshape({rows, 2}) * (r + 1);
  };
  (yg * cg(rank)).sum().backward();
  torch::Tensor avg = torch::zeros({rows, 2}, torch::kDouble);
  for (int r : ranks) avg += cg(r) / m;
  expect_close(xg.grad(), avg.narrow(0, me * (me + 1) / 2, me + 1), 1e-12, 1e-12,
               "allgather gradient on the set");
  // broadcast from the set's last member (a rank of the job): its gradient is the
  // members' average, the others' zero.
  const int root = ranks.back();
  auto xb = torch::full({3}, rank, torch::kDouble).requires_grad_(true);
  auto yb = kolo::broadcast(xb, {.name = "set.bcast", .root = root, .process_set = id});
  expect_close(yb, torch::full({3}, root, torch::kDouble), 0, 0,
               "broadcast from rank " + std::to_string(root));
  (yb * (rank + 1.0)).sum().backward();
  const double want = rank == root ? members / m : 0.0;
  expect_close(xb.grad(), torch::full({3}, want, torch::kDouble), 1e-12, 1e-12,
               "broadcast gradient on the set");
}

void check_objects_in(const kolo::ProcessSet& set) {
  const int root = set.ranks().back();
  const std::string got =
      kolo::broadcast_object("from " + std::to_string(kolo::rank()), root, "set.obj", set.id());
  expect(got == "from " + std::to_string(root), "broadcast_object on the set gave '" + got + "'");
  const std::vector<std::string> all =
      kolo::allgather_object(std::to_string(kolo::rank()), "set.objs", set.id());
  expect(all.size() == set.ranks().size(), "allgather_object on the set: one per member");
  for (std::size_t i = 0; i < all.size(); ++i) {
    expect(all[i] == std::to_string(set.ranks()[i]),
           "allgather_object on the set, member " + std::to_string(i) + ": '" + all[i] + "'");
  }
}

}  // namespace

void check_process_sets() {
  std::vector<int> upper;
  for (int r = 1; r < kolo::size(); ++r) upper.push_back(r);
  const kolo::ProcessSet set = kolo::add_process_set(upper);
  if (set.included()) {
    check_autograd_in(set);
    check_optimizer_on(set);
    check_objects_in(set);
  } else {
    torch::nn::Linear net(3, 2);
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
    kolo::DistributedOptimizerOptions o;
    o.process_set = set.id();
    expect_error([&] { kolo::DistributedOptimizer opt(sgd, net->named_parameters(), o); },
                 "rank 0 is not a member of process set " + std::to_string(set.id()));
  }
  kolo::barrier();
  kolo::remove_process_set(set);
}

}  // namespace kolo_test
