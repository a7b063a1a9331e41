// Worker program of kolo/elastic.h's tests across real processes: run under kolorun with 3
// workers (a job that is not elastic: sync, commit and the sampler's collectives are the
// same there). Each check prints "<check> OK" or "<check> FAILED: why".
//
// The property of sync: the root is the lowest rank with the most commits, whoever that
// is, and afterwards every rank holds exactly that rank's model, optimizer state, values
// and sampler progress, which each rank checks against a copy it computes itself.
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "kolo/elastic.h"

namespace {

using kolo::ElasticSampler;
using kolo::elastic::TorchState;
using kolo_test::expect;
using kolo_test::expect_close;
using kolo_test::run;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc = register_module("fc", torch::nn::Linear(4, 3));
    bn = register_module("bn", torch::nn::BatchNorm1d(3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Net);

// Rank r's model: its own initial values, `steps` local Adam steps (no communication).
struct Replica {
  Net net;
  torch::optim::Adam adam;
  explicit Replica(int rank) : net(make(rank)), adam(net->parameters(), 1e-2 * (rank + 1)) {}
  static Net make(int rank) {
    torch::manual_seed(100 + rank);
    return Net();
  }
  void train(int steps) {
    for (int s = 0; s < steps; ++s) {
      torch::manual_seed(7 + s);
      adam.zero_grad();
      net->forward(torch::randn({6, 4})).pow(2).sum().backward();
      adam.step();
    }
  }
};

void expect_same_model(Replica& got, Replica& want, const std::string& what) {
  const auto a = got.net->parameters(), b = want.net->parameters();
  for (std::size_t i = 0; i < a.size(); ++i)
    expect_close(a[i], b[i], 0, 0, what + ": parameter " + std::to_string(i));
  const auto c = got.net->buffers(), d = want.net->buffers();
  for (std::size_t i = 0; i < c.size(); ++i)
    expect_close(c[i].to(torch::kDouble), d[i].to(torch::kDouble), 0, 0,
                 what + ": buffer " + std::to_string(i));
  expect(got.adam.param_groups()[0].options().get_lr() ==
             want.adam.param_groups()[0].options().get_lr(),
         what + ": learning rate");
  // Adam's state: one more identical step from both must land on the same parameters.
  got.train(1);
  want.train(1);
  const auto e = got.net->parameters(), f = want.net->parameters();
  for (std::size_t i = 0; i < e.size(); ++i)
    expect_close(e[i], f[i], 0, 0, what + ": parameter " + std::to_string(i) + " a step later");
}

// Rank 1 made the most commits (3, the others 1; rank 2 none, as a new worker): every rank
// ends with rank 1's state, commits() == 3, and restore() returns to it.
void check_sync_takes_the_most_committed_rank() {
  const int rank = kolo::rank();
  Replica mine(rank);
  if (rank == 1) mine.train(3);
  // Without a sampler, commit() is collective only in elastic jobs (hosts_updated): here
  // each rank commits alone, as many times as it likes.
  TorchState state(*mine.net, mine.adam, {{"epoch", 10 * rank}});
  const int commits = rank == 1 ? 3 : rank == 0 ? 1 : 0;
  for (int c = 0; c < commits; ++c) state.commit();
  state.sync();
  expect(state.commits() == 3,
         "commits() after sync is " + std::to_string(state.commits()) + ", want 3");
  expect(state.value("epoch") == 10,
         "epoch value " + std::to_string(state.value("epoch")) + ", want rank 1's 10");
  Replica want(1);
  want.train(3);
  mine.net->train(false);
  want.net->train(false);
  // Restore after a change goes back to the synced state (rank 1's), not to this rank's.
  mine.train(2);
  state.restore();
  expect_same_model(mine, want, "rank " + std::to_string(rank) + " after sync");
}

// The sampler: every rank records a different amount; a commit allgathers the counts, so
// every rank then holds the same progress; a sync from rank 1 carries its epoch.
void check_sampler_progress_across_ranks() {
  const int rank = kolo::rank(), n = kolo::size();
  Replica mine(rank);
  ElasticSampler sampler(50, true, 3);
  TorchState state(*mine.net, mine.adam);
  state.attach(sampler);
  expect(sampler.num_replicas() == n && sampler.rank() == rank, "sharded over the job");
  const auto batch = sampler.next(static_cast<std::size_t>(rank + 2));
  expect(batch.has_value(), "a first batch");
  sampler.record_batch(static_cast<std::int64_t>(batch->size()));
  state.commit();
  std::int64_t done = 0;
  for (int r = 0; r < n; ++r) done += r + 2;
  expect(sampler.remaining() == 50 - done, "remaining " + std::to_string(sampler.remaining()) +
                                               " after a commit, want " +
                                               std::to_string(50 - done));
  const auto all = kolo::allgather_object(sampler.progress(), "elastic_test.progress");
  for (int r = 1; r < n; ++r) expect(all[r] == all[0], "rank " + std::to_string(r) + " differs");
  // Every rank's shard is now the rest of the epoch, dealt anew.
  state.sync();
  std::vector<std::int64_t> shard = sampler.indices();
  const auto shards = kolo::allgather(
      torch::tensor(std::vector<std::int64_t>(shard.begin(), shard.end()), torch::kLong));
  expect(shards.numel() == 50 - done, "the shards hold the rest of the epoch");
  const std::set<std::int64_t> distinct(shards.data_ptr<std::int64_t>(),
                                        shards.data_ptr<std::int64_t>() + shards.numel());
  expect(static_cast<std::int64_t>(distinct.size()) == shards.numel(), "an index twice");
}

// run() outside an elastic job: one sync, one train, true; a DistributedOptimizer works as
// the state's optimizer (its state is in the wrapped one).
void check_run_outside_an_elastic_job() {
  Replica mine(kolo::rank());
  kolo::DistributedOptimizer opt(mine.adam, *mine.net);
  TorchState state(*mine.net, opt, {{"epoch", 0}});
  int runs = 0;
  const bool done = kolo::elastic::run(state, [&](kolo::elastic::State&) {
    ++runs;
    torch::manual_seed(3 + kolo::rank());
    opt.zero_grad();
    mine.net->forward(torch::randn({6, 4})).pow(2).sum().backward();
    opt.step();
    state.commit();
  });
  expect(done && runs == 1,
         "run() returned " + std::to_string(done) + " after " + std::to_string(runs) + " runs");
  const auto a = mine.net->parameters();
  const auto gathered = kolo::allgather(a[0].detach().reshape({1, -1}));
  for (int r = 1; r < kolo::size(); ++r)
    expect_close(gathered[r], gathered[0], 0, 0, "rank " + std::to_string(r) + "'s weights");
}

}  // namespace

int main() {
  kolo::init();
  torch::set_num_threads(1);
  run("sync_takes_the_most_committed_rank", check_sync_takes_the_most_committed_rank);
  run("sampler_progress_across_ranks", check_sampler_progress_across_ranks);
  run("run_outside_an_elastic_job", check_run_outside_an_elastic_job);
  kolo::shutdown();
  return kolo_test::g_failed ? 1 : 0;
}
