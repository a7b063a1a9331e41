// Worker program for what libtorch users bring along (issue 12): libtorch's DataLoader
// with kolo's sampler, DistributedOptimizer where libtorch expects an Optimizer (LR
// schedulers, functions taking Optimizer&, torch::save), module buffers kept equal to
// rank 0's, and a GAN (two DistributedOptimizers, the discriminator frozen while the
// generator trains), each compared with a single-process reference that every worker
// computes itself. Run under kolorun with 2 workers, and alone; prints "<check> OK" or
// "<check> FAILED: why" per check.
#include <cstdio>
#include <set>
#include <sstream>

#include "check.h"
#include "kolo/torch.h"

namespace {

using kolo::DistributedOptimizer;
using kolo_test::expect;
using kolo_test::expect_close;
using kolo_test::expect_error;
using kolo_test::run;

torch::nn::Sequential mlp(int in, int hidden, int out, int seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential m(torch::nn::Linear(in, hidden), torch::nn::Tanh(),
                          torch::nn::Linear(hidden, out));
  m->to(torch::kDouble);
  return m;
}

// Every parameter (and buffer) of `module` flattened into one tensor.
torch::Tensor flat(const torch::nn::Module& module, bool buffers = false) {
  std::vector<torch::Tensor> parts;
  for (const auto& t : buffers ? module.buffers() : module.parameters())
    parts.push_back(t.detach().to(torch::kDouble).reshape({-1}));
  return torch::cat(parts);
}

// Throws unless `t` is bitwise the same on every rank.
void expect_same_everywhere(const torch::Tensor& t, const std::string& name,
                            const std::string& what) {
  const torch::Tensor root = kolo::broadcast(t, {.name = name, .root = 0});
  expect(torch::equal(root, t), what + " differs from rank 0's on rank " +
                                    std::to_string(kolo::rank()) + " (max difference " +
                                    std::to_string((root - t).abs().max().item<double>()) + ")");
}

void set_trainable(const torch::nn::Module& module, bool on) {
  for (auto p : module.parameters()) p.requires_grad_(on);
}

// --- DataLoader with kolo's sampler --------------------------------------------------------

void check_data_loader() {
  // Every epoch, the ranks' loaders together yield each index once (drop_last: all but
  // the remainder), in an order that changes from epoch to epoch without set_epoch().
  const std::int64_t size = 37;
  const int n = kolo::size(), rank = kolo::rank();
  kolo::DistributedSampler sampler(size, n, rank, /*shuffle=*/true, /*seed=*/3);
  auto loader =
      torch::data::make_data_loader(torch::data::datasets::TensorDataset(torch::arange(size)),
                                    sampler, torch::data::DataLoaderOptions().batch_size(5));
  std::vector<std::vector<std::int64_t>> previous;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::int64_t> mine;
    for (auto& batch : *loader)
      for (auto& example : batch) mine.push_back(example.data.item<std::int64_t>());
    const auto all = kolo::allgather_object(torch::IValue(mine), "loader." + std::to_string(epoch));
    std::vector<std::vector<std::int64_t>> shards;
    std::set<std::int64_t> seen;
    for (const auto& v : all) {
      shards.push_back(v.toIntVector());
      expect(static_cast<std::int64_t>(shards.back().size()) == size / n,
             "a shard of " + std::to_string(shards.back().size()) + " indices in epoch " +
                 std::to_string(epoch));
      for (std::int64_t i : shards.back()) expect(seen.insert(i).second, "an index read twice");
    }
    expect(static_cast<std::int64_t>(seen.size()) == size / n * n, "not a partition");
    expect(sampler.epoch() == epoch, "the kept sampler does not follow the loader's epoch");
    if (!previous.empty()) expect(shards != previous, "the same order as the epoch before");
    previous = shards;
  }
}

// --- DistributedOptimizer as a torch::optim::Optimizer --------------------------------------

// A user's function written for any libtorch optimizer.
void train_step(torch::optim::Optimizer& opt, torch::nn::Sequential& model, const torch::Tensor& x,
                const torch::Tensor& y) {
  opt.zero_grad();
  torch::mse_loss(model->forward(x), y).backward();
  opt.step();
}

void check_optimizer_interface() {
  // Trains with the DistributedOptimizer through Optimizer& and a StepLR on it; a
  // reference trains the global batch with a plain SGD and its own StepLR.
  const int n = kolo::size(), rank = kolo::rank(), per_rank = 4;
  auto model = mlp(3, 8, 2, 1), ref = mlp(3, 8, 2, 1);
  torch::optim::SGD sgd(model->parameters(), 0.2), ref_sgd(ref->parameters(), 0.2);
  DistributedOptimizer opt(sgd, model->named_parameters(), {.name_prefix = "iface."});
  torch::optim::StepLR schedule(opt, /*step_size=*/1, /*gamma=*/0.5);
  torch::optim::StepLR ref_schedule(ref_sgd, 1, 0.5);
  for (int s = 0; s < 3; ++s) {
    torch::manual_seed(50 + s);
    const auto x = torch::randn({n * per_rank, 3}, torch::kDouble);
    const auto y = torch::randn({n * per_rank, 2}, torch::kDouble);
    train_step(opt, model, x.narrow(0, rank * per_rank, per_rank),
               y.narrow(0, rank * per_rank, per_rank));
    train_step(ref_sgd, ref, x, y);
    schedule.step();
    ref_schedule.step();
  }
  // The scheduler's learning rate shows on the DistributedOptimizer's groups at once and
  // reaches the wrapped SGD at the next step(); the parameters above prove that each
  // step used the scheduled rate (the reference's).
  const double scheduled = ref_sgd.param_groups()[0].options().get_lr();
  expect(scheduled < 0.2, "the reference's scheduler did not lower the learning rate");
  expect(opt.param_groups()[0].options().get_lr() == scheduled,
         "the scheduler's lr is not on the DistributedOptimizer's groups");
  expect_close(flat(*model), flat(*ref), 1e-10, 1e-12, "parameters after Optimizer& steps");
  // step(closure): the closure runs once and its loss comes back.
  int calls = 0;
  const torch::Tensor loss = opt.step([&] {
    ++calls;
    opt.zero_grad();
    auto l = torch::mse_loss(model->forward(torch::ones({2, 3}, torch::kDouble)),
                             torch::zeros({2, 2}, torch::kDouble));
    l.backward();
    return l;
  });
  expect(calls == 1 && loss.defined(), "step(closure) calls the closure once");
  expect(sgd.param_groups()[0].options().get_lr() == scheduled,
         "the scheduler's lr did not reach the wrapped SGD at step()");
  // LBFGS calls the closure many times per step: refused.
  torch::optim::LBFGS lbfgs(model->parameters(), 0.1);
  expect_error([&] { DistributedOptimizer d(lbfgs, model->named_parameters(), {}); }, "LBFGS");
}

void check_save_and_broadcast_state() {
  const int rank = kolo::rank();
  auto model = mlp(3, 4, 1, 2);
  torch::optim::Adam adam(model->parameters(), 0.01);
  DistributedOptimizer opt(adam, model->named_parameters(), {.name_prefix = "state."});
  opt.zero_grad();
  model->forward(torch::ones({2, 3}, torch::kDouble)).sum().backward();
  opt.step();
  std::stringstream bytes;
  torch::save(opt, bytes);
  auto other_model = mlp(3, 4, 1, 2);
  torch::optim::Adam other(other_model->parameters(), 0.01);
  DistributedOptimizer loaded(other, other_model->named_parameters(), {.name_prefix = "state2."});
  torch::load(loaded, bytes);
  expect(other.state().size() == adam.state().size() && !adam.state().empty(),
         "torch::load of a saved DistributedOptimizer restores the wrapped state");
  // broadcast_optimizer_state takes the DistributedOptimizer too; root's lr, set through
  // the DistributedOptimizer's groups, reaches every rank's wrapped optimizer.
  opt.param_groups()[0].options().set_lr(rank == 0 ? 0.003 : 0.7);
  kolo::broadcast_optimizer_state(opt, 0);
  expect(std::abs(adam.param_groups()[0].options().get_lr() - 0.003) < 1e-15,
         "broadcast_optimizer_state(DistributedOptimizer) did not reach the wrapped Adam");
  expect(std::abs(opt.param_groups()[0].options().get_lr() - 0.003) < 1e-15,
         "the DistributedOptimizer's groups after broadcast_optimizer_state");
}

void check_zero_grad_through_optimizer_ref() {
  // libtorch's zero_grad is not virtual: skipping a step through an Optimizer& zeroes
  // .grad under its running allreduce. The next backward says what to do instead, and
  // the DistributedOptimizer's own zero_grad() recovers.
  auto model = mlp(3, 4, 1, 3);
  torch::optim::SGD sgd(model->parameters(), 0.1);
  DistributedOptimizer opt(sgd, model->named_parameters(), {.name_prefix = "zg."});
  torch::optim::Optimizer& base = opt;
  const auto x = torch::ones({2, 3}, torch::kDouble);
  model->forward(x).sum().backward();
  base.zero_grad();
  expect_error<std::exception>([&] { model->forward(x).sum().backward(); }, "zeroed or replaced",
                               "zero_grad() on the kolo::DistributedOptimizer");
  opt.zero_grad();
  model->forward(x).sum().backward();
  opt.step();
}

// --- buffers --------------------------------------------------------------------------------

torch::nn::Sequential bn_net() {
  torch::manual_seed(7);
  torch::nn::Sequential m(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4), torch::nn::Tanh(),
                          torch::nn::Linear(4, 1));
  m->to(torch::kDouble);
  return m;
}

void check_buffers() {
  // Each rank's batch differs, so each rank's BatchNorm statistics would too; a
  // DistributedOptimizer built from the module makes them rank 0's at every step.
  const int rank = kolo::rank(), n = kolo::size();
  for (bool broadcast : {true, false}) {
    auto model = bn_net();
    torch::optim::SGD sgd(model->parameters(), 0.1);
    DistributedOptimizer opt(
        sgd, *model,
        {.name_prefix = broadcast ? "bn_on." : "bn_off.", .broadcast_buffers = broadcast});
    for (int s = 0; s < 3; ++s) {
      const std::string step = std::to_string(s);
      torch::manual_seed(100 * (rank + 1) + s);
      const auto x = torch::randn({6, 3}, torch::kDouble) * (rank + 1);
      opt.zero_grad();
      model->forward(x).pow(2).mean().backward();
      const torch::Tensor root_before = kolo::broadcast(
          flat(*model, true), {.name = "bn.root." + std::to_string(broadcast) + step, .root = 0});
      opt.step();
      const torch::Tensor after = flat(*model, true);
      expect_same_everywhere(flat(*model), "bn.params." + std::to_string(broadcast) + step,
                             "parameters");
      if (broadcast) {
        expect(torch::equal(after, root_before), "buffers after step() are not rank 0's");
      } else if (n > 1) {
        expect(!torch::equal(after, root_before) || rank == 0,
               "buffers equal without broadcast_buffers");
      }
    }
    if (!broadcast) {
      kolo::broadcast_buffers(*model, 0);
      expect_same_everywhere(flat(*model, true), "bn.after_call",
                             "buffers after broadcast_buffers");
    }
  }
}

// --- a GAN ------------------------------------------------------------------------------------

struct Gan {
  explicit Gan(int seed) : g(mlp(4, 16, 2, seed)), d(mlp(2, 16, 1, seed + 1)) {}
  torch::nn::Sequential g, d;
};

// The global batch of step s: real points near (2, -1) and noise, rows of rank r at
// [r * per_rank, (r + 1) * per_rank).
std::pair<torch::Tensor, torch::Tensor> gan_batch(int s, int rows) {
  torch::manual_seed(500 + s);
  const auto real =
      torch::randn({rows, 2}, torch::kDouble) * 0.5 + torch::tensor({2.0, -1.0}, torch::kDouble);
  const auto noise = torch::randn({rows, 4}, torch::kDouble);
  return {real, noise};
}

torch::Tensor bce(const torch::Tensor& logits, double label) {
  return torch::binary_cross_entropy_with_logits(logits, torch::full_like(logits, label));
}

// One GAN step: the discriminator on real and (detached) fake points, then the generator
// through the discriminator, whose parameters are frozen meanwhile.
void gan_step(Gan& m, torch::optim::Optimizer& opt_d, torch::optim::Optimizer& opt_g,
              const torch::Tensor& real, const torch::Tensor& noise) {
  opt_d.zero_grad();
  const auto fake = m.g->forward(noise);
  (bce(m.d->forward(real), 1) + bce(m.d->forward(fake.detach()), 0)).backward();
  opt_d.step();
  set_trainable(*m.d, false);
  opt_g.zero_grad();
  bce(m.d->forward(fake), 1).backward();
  opt_g.step();
  set_trainable(*m.d, true);
}

void check_gan() {
  const int n = kolo::size(), rank = kolo::rank(), per_rank = 8;
  Gan m(11), ref(11);
  torch::optim::Adam adam_g(m.g->parameters(), 0.01), adam_d(m.d->parameters(), 0.01);
  torch::optim::Adam ref_g(ref.g->parameters(), 0.01), ref_d(ref.d->parameters(), 0.01);
  DistributedOptimizer opt_g(adam_g, *m.g, {.name_prefix = "gan.g."});
  DistributedOptimizer opt_d(adam_d, *m.d, {.name_prefix = "gan.d."});
  for (int s = 0; s < 6; ++s) {
    auto [real, noise] = gan_batch(s, n * per_rank);
    gan_step(m, opt_d, opt_g, real.narrow(0, rank * per_rank, per_rank),
             noise.narrow(0, rank * per_rank, per_rank));
    gan_step(ref, ref_d, ref_g, real, noise);
  }
  expect_same_everywhere(flat(*m.g), "gan.same.g", "the generator");
  expect_same_everywhere(flat(*m.d), "gan.same.d", "the discriminator");
  expect_close(flat(*m.g), flat(*ref.g), 1e-9, 1e-11, "generator against the reference");
  expect_close(flat(*m.d), flat(*ref.d), 1e-9, 1e-11, "discriminator against the reference");
}

void check_gan_mistakes() {
  // What a user meets on the way: one name_prefix for both optimizers (both models'
  // parameters are called "0.weight", ...), and the generator's loss flowing back into
  // the unfrozen discriminator, then zeroed by the module's zero_grad().
  Gan m(21);
  torch::optim::Adam adam_g(m.g->parameters(), 0.01), adam_d(m.d->parameters(), 0.01);
  {
    DistributedOptimizer opt_g(adam_g, m.g->named_parameters());
    expect_error([&] { DistributedOptimizer opt_d(adam_d, m.d->named_parameters()); },
                 "tensor name 'grad.0.weight'", "name_prefix");
    expect_error(
        [&] { DistributedOptimizer again(adam_g, m.g->named_parameters(), {.name_prefix = "x."}); },
        "already belongs to another live DistributedOptimizer");
  }
  DistributedOptimizer opt_g(adam_g, m.g->named_parameters(), {.name_prefix = "mis.g."});
  DistributedOptimizer opt_d(adam_d, m.d->named_parameters(), {.name_prefix = "mis.d."});
  auto [real, noise] = gan_batch(0, 8);
  auto d_step = [&] {
    m.d->zero_grad();  // the module's, as pytorch/examples' DCGAN does
    const auto fake = m.g->forward(noise).detach();
    (bce(m.d->forward(real), 1) + bce(m.d->forward(fake), 0)).backward();
    opt_d.step();
  };
  d_step();
  m.g->zero_grad();
  bce(m.d->forward(m.g->forward(noise)), 1).backward();  // D not frozen: D's hooks run too
  opt_g.step();
  expect_error<std::exception>(d_step, "parameter '", "freeze these parameters",
                               "requires_grad_(false)");
  opt_d.zero_grad();  // finishes the discriminator's stray reductions
  d_step();
}

}  // namespace

int main() {
  kolo::init();
  torch::set_num_threads(1);
  run("data_loader", check_data_loader);
  run("optimizer_interface", check_optimizer_interface);
  run("save_and_broadcast_state", check_save_and_broadcast_state);
  run("zero_grad_through_optimizer_ref", check_zero_grad_through_optimizer_ref);
  run("buffers", check_buffers);
  run("gan", check_gan);
  run("gan_mistakes", check_gan_mistakes);
  kolo::shutdown();
  return kolo_test::g_failed ? 1 : 0;
}
