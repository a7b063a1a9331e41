// TorchState: restore() puts back exactly what the last commit saw (parameters, buffers,
// Adam's state and options, the values, an attached sampler's progress), with a plain
// optimizer and with a DistributedOptimizer; sync() on one rank; run() with an injected
// reset restores a real model. kolo runs as a job of one (elastic_test.cc starts it).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kolo/elastic.h"

namespace kolo::elastic {
namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 8));
    bn = register_module("bn", torch::nn::BatchNorm1d(8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Net);

void train_steps(Net& net, torch::optim::Optimizer& opt, int steps, int seed) {
  net->train();
  for (int s = 0; s < steps; ++s) {
    torch::manual_seed(seed + s);
    const auto x = torch::randn({5, 6});
    const auto y = torch::randn({5, 3});
    opt.zero_grad();
    torch::mse_loss(net->forward(x), y).backward();
    opt.step();
  }
}

// Everything restore() must bring back, copied independently of TorchState.
struct Seen {
  std::vector<torch::Tensor> parameters, buffers, adam;  // adam: step, exp_avg, exp_avg_sq
  double lr = 0;
};

Seen look(Net& net, torch::optim::Adam& adam) {
  Seen s;
  for (const auto& p : net->parameters()) s.parameters.push_back(p.detach().clone());
  for (const auto& b : net->buffers()) s.buffers.push_back(b.clone());
  for (const auto& p : net->parameters()) {
    auto it = adam.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == adam.state().end()) continue;
    const auto& st = static_cast<const torch::optim::AdamParamState&>(*it->second);
    s.adam.push_back(torch::tensor(static_cast<double>(st.step())));
    s.adam.push_back(st.exp_avg().clone());
    s.adam.push_back(st.exp_avg_sq().clone());
  }
  s.lr = adam.param_groups()[0].options().get_lr();
  return s;
}

void expect_same(const Seen& a, const Seen& b) {
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (std::size_t i = 0; i < a.parameters.size(); ++i)
    EXPECT_TRUE(torch::equal(a.parameters[i], b.parameters[i])) << "parameter " << i;
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (std::size_t i = 0; i < a.buffers.size(); ++i)
    EXPECT_TRUE(torch::equal(a.buffers[i], b.buffers[i])) << "buffer " << i;
  ASSERT_EQ(a.adam.size(), b.adam.size()) << "Adam's state has other parameters";
  for (std::size_t i = 0; i < a.adam.size(); ++i)
    EXPECT_TRUE(torch::equal(a.adam[i], b.adam[i])) << "Adam state tensor " << i;
  EXPECT_EQ(a.lr, b.lr);
}

void round_trip(bool distributed) {
  torch::manual_seed(1);
  Net net;
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-2));
  std::unique_ptr<DistributedOptimizer> dopt;
  if (distributed) dopt = std::make_unique<DistributedOptimizer>(adam, *net);
  torch::optim::Optimizer& opt = dopt ? static_cast<torch::optim::Optimizer&>(*dopt) : adam;

  TorchState state(*net, opt, {{"epoch", 0}, {"batch", 0}});
  train_steps(net, opt, 3, 10);
  state.value("epoch") = 2;
  state.value("batch") = 17;
  state.commit();
  const Seen committed = look(net, adam);
  ASSERT_EQ(committed.adam.size(), 3 * net->parameters().size());

  // Everything moves on: parameters, running statistics, Adam's moments and step, the
  // learning rate (set where a scheduler would set it), the values.
  train_steps(net, opt, 4, 20);
  opt.param_groups()[0].options().set_lr(5e-3);
  train_steps(net, opt, 1, 30);
  state.value("epoch") = 3;
  state.value("batch") = 1;
  EXPECT_EQ(adam.param_groups()[0].options().get_lr(), 5e-3);
  EXPECT_FALSE(torch::equal(net->fc1->weight, committed.parameters[0]));

  state.restore();
  expect_same(look(net, adam), committed);
  EXPECT_EQ(state.value("epoch"), 2);
  EXPECT_EQ(state.value("batch"), 17);
  EXPECT_EQ(opt.param_groups()[0].options().get_lr(), 1e-2) << "the optimizer's own groups";

  // The snapshot is not used up, and training from it is training from the commit.
  train_steps(net, opt, 2, 40);
  const Seen after_two = look(net, adam);
  state.restore();
  expect_same(look(net, adam), committed);
  train_steps(net, opt, 2, 40);
  expect_same(look(net, adam), after_two);

  // A state restored before any commit goes back to how it was built.
  TorchState fresh(*net, opt);
  const Seen at_build = look(net, adam);
  train_steps(net, opt, 1, 50);
  fresh.restore();
  expect_same(look(net, adam), at_build);
}

TEST(TorchStateTest, RestoreBringsBackTheLastCommit) { round_trip(false); }

TEST(TorchStateTest, RestoreWithADistributedOptimizer) { round_trip(true); }

TEST(TorchStateTest, RestoreBeforeTheFirstStepEmptiesTheOptimizerState) {
  torch::manual_seed(5);
  Net net;
  torch::optim::Adam adam(net->parameters());
  TorchState state(*net, adam);
  const Seen built = look(net, adam);
  train_steps(net, adam, 2, 90);
  ASSERT_FALSE(adam.state().empty());
  state.restore();
  EXPECT_TRUE(adam.state().empty()) << "Adam would go on with moments from after the commit";
  expect_same(look(net, adam), built);
}

TEST(TorchStateTest, SyncOnOneRankKeepsTheStateAndMakesItTheSnapshot) {
  torch::manual_seed(2);
  Net net;
  torch::optim::Adam adam(net->parameters());
  TorchState state(*net, adam, {{"epoch", 4}});
  train_steps(net, adam, 2, 60);
  state.commit();
  train_steps(net, adam, 1, 70);
  state.value("epoch") = 5;
  const Seen before = look(net, adam);
  state.sync();
  expect_same(look(net, adam), before);
  EXPECT_EQ(state.value("epoch"), 5);
  EXPECT_EQ(state.commits(), 1);
  train_steps(net, adam, 1, 80);
  state.restore();  // to the synced state, not to the commit before it
  expect_same(look(net, adam), before);
  EXPECT_EQ(state.value("epoch"), 5);
}

TEST(TorchStateTest, AnAttachedSamplerIsCommittedAndRestoredWithTheModel) {
  torch::manual_seed(3);
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  ElasticSampler sampler(20);
  TorchState state(*net, sgd, {{"epoch", 0}});
  state.attach(sampler);
  sampler.next(8);
  sampler.record_batch(8);
  state.commit();
  EXPECT_EQ(sampler.remaining(), 12);
  sampler.next(4);
  sampler.record_batch(4);
  sampler.set_epoch(1);
  state.restore();
  EXPECT_EQ(sampler.epoch(), 0);
  EXPECT_EQ(sampler.remaining(), 12);
  EXPECT_EQ(sampler.recorded(), 0);
  EXPECT_EQ(sampler.shard_size(), 12);
  state.sync();
  EXPECT_EQ(sampler.remaining(), 12);
}

TEST(TorchStateTest, ValuesByName) {
  Net net;
  torch::optim::SGD sgd(net->parameters(), 0.1);
  TorchState state(*net, sgd, {{"epoch", 3}, {"batch", 0}});
  EXPECT_EQ(state.value("epoch"), 3);
  ++state.value("batch");
  EXPECT_EQ(state.values().at("batch"), 1);
  try {
    state.value("step");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no value 'step' (it has: batch, epoch)"),
              std::string::npos)
        << e.what();
  }
}

TEST(TorchStateTest, RunRestoresTheModelAfterAWorkerLeft) {
  torch::manual_seed(4);
  Net net;
  torch::optim::Adam adam(net->parameters());
  TorchState state(*net, adam, {{"epoch", 0}});
  double lr_at_reset = 0;
  state.register_reset_callbacks({[&] {
    lr_at_reset = adam.param_groups()[0].options().get_lr();
    adam.param_groups()[0].options().set_lr(1e-3 * kolo::size());
  }});
  std::vector<Seen> entries;
  Seen at_failure;
  int resets = 0;
  EXPECT_TRUE(detail::run(
      state,
      [&](State&) {
        entries.push_back(look(net, adam));
        for (; state.value("epoch") < 3; ++state.value("epoch")) {
          train_steps(net, adam, 2, 100 + 10 * static_cast<int>(state.value("epoch")));
          state.commit();
          if (entries.size() == 1 && state.value("epoch") == 1) {
            at_failure = look(net, adam);
            train_steps(net, adam, 1, 999);  // lost
            adam.param_groups()[0].options().set_lr(0.5);
            throw WorkersChanged("rank 1 (host b) was killed by signal 9 (SIGKILL)");
          }
        }
      },
      [&] {
        ++resets;
        return true;
      }));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(resets, 1);
  EXPECT_EQ(lr_at_reset, 1e-3) << "the callback runs after the restore";
  EXPECT_EQ(state.value("epoch"), 3);
  EXPECT_EQ(state.commits(), 4);        // epochs 0, 1 (committed before the failure), 1 again, 2
  expect_same(entries[1], at_failure);  // train ran again from the commit
}

}  // namespace
}  // namespace kolo::elastic
