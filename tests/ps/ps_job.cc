// One program for every task of a parameter-server test job (TF_CONFIG says which; run
// under kolorun --ps N -np M). The chief checks and prints "PASS ..." or "FAIL: ...".
//
//   ps_job sync [sgd|adam]   K = workers synchronous training equals one process training on
//                            the rounds' batches together (all-reduce training)
//   ps_job backup            K = 2 of 3 workers: a slow worker's stale gradients are dropped
//                            and training goes on (no deadlock)
//   ps_job faults STEPS      every step runs at least once while a worker is killed and
//                            restarted (the test kills it); the restarted worker takes steps
//   ps_job sparse            an embedding's pushes carry only the touched rows (bytes counted)
//   ps_job checkpoint DIR    trains, checkpointing every 10 steps, until a ps task dies: the
//                            chief's error must name it (the test kills the ps)
//   ps_job restore DIR       a new job restores DIR's checkpoint: the same parameters
//   ps_job fit_loop          TensorFlow's tutorial as one program: Model::fit (Dense(10),
//                            mse, 10 examples of y [b], batches of 64), then the chief runs
//                            a coordinator loop of its own steps on the same workers
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <thread>

#include "kolo/error.h"
#include "kolo/train.h"

using kolo::train::ClusterCoordinator;
using kolo::train::ParameterServerOptions;
using kolo::train::ParameterServerStrategy;
using kolo::train::RemoteValue;

namespace {

constexpr std::int64_t kExamples = 256, kFeatures = 8, kClasses = 4, kBatch = 8;

torch::nn::Sequential make_net() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(kFeatures, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, kClasses));
}

struct Data {
  torch::Tensor x, y;
  Data() {
    torch::manual_seed(11);
    x = torch::randn({kExamples, kFeatures});
    y = torch::randint(0, kClasses, {kExamples}, torch::kLong);
  }
  // Worker w's j-th batch.
  torch::Tensor rows(int w, std::int64_t j) const {
    const std::int64_t start = (w * 97 + j * kBatch) % kExamples;
    return torch::arange(start, start + kBatch, torch::kLong) % kExamples;
  }
};

// The loss of examples `idx` (backward() gives the step's gradients).
torch::Tensor loss_on(torch::nn::Sequential& net, const Data& data, const torch::Tensor& idx) {
  return torch::nn::functional::cross_entropy(net->forward(data.x.index_select(0, idx)),
                                              data.y.index_select(0, idx));
}

int workers_of(const ParameterServerStrategy& s) { return s.num_worker_tasks(); }

int fail(const std::string& why) {
  std::cout << "FAIL: " << why << std::endl;
  return 1;
}

// --- sync: K = workers equals all-reduce training -------------------------------------

int run_sync(const std::string& optimizer) {
  kolo::train::ClusterResolver resolver = kolo::train::ClusterResolver::from_tf_config();
  const int W = static_cast<int>(resolver.cluster_spec().worker.size());
  ParameterServerOptions po;
  po.replicas_to_aggregate = W;
  ParameterServerStrategy strategy(resolver, kolo::train::VariablePartitioner::fixed_shards(2), po);
  auto net = make_net();
  const kolo::train::OptimizerSpec spec =
      optimizer == "adam"
          ? kolo::train::OptimizerSpec(kolo::train::Adam{.learning_rate = 0.01})
          : kolo::train::OptimizerSpec(kolo::train::SGD{.learning_rate = 0.1, .momentum = 0.9});
  strategy.create_variables(*net, spec);
  Data data;
  std::int64_t j = 0;
  strategy.register_step("train", [&](const torch::Tensor&) {
    strategy.pull(*net);
    auto loss = loss_on(net, data, data.rows(strategy.task_index(), j++));
    loss.backward();
    if (!strategy.push(*net)) throw kolo::Error(kolo::ErrorCode::kInternal, "a push was stale");
    return loss.detach();
  });
  if (!strategy.is_chief()) {
    strategy.join();
    return 0;
  }
  constexpr int kRounds = 12;
  {
    ClusterCoordinator coordinator(strategy);
    for (int i = 0; i < kRounds * W; ++i) coordinator.schedule("train");
    coordinator.join();
  }
  strategy.pull(*net);
  // The reference: one process, round r's batch = every worker's r-th batch together.
  auto ref = make_net();
  std::unique_ptr<torch::optim::Optimizer> opt =
      kolo::train::make_optimizer(spec, ref->parameters());
  for (int r = 0; r < kRounds; ++r) {
    std::vector<torch::Tensor> parts;
    for (int w = 0; w < W; ++w) parts.push_back(data.rows(w, r));
    const torch::Tensor idx = torch::cat(parts);
    opt->zero_grad();
    loss_on(ref, data, idx).backward();
    opt->step();
  }
  double diff = 0;
  const auto a = net->parameters(), b = ref->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, (a[i] - b[i]).abs().max().item<double>());
  }
  std::cout << "sync " << optimizer << " K=" << W << ": max |ps - reference| = " << diff
            << std::endl;
  if (!(diff < 1e-5)) return fail("synchronous ps training differs from all-reduce training");
  std::cout << "PASS sync" << std::endl;
  return 0;
}

// --- backup: synchronous with a backup worker (K = 2 of 3 workers) ------------------------

int run_backup() {
  ParameterServerOptions po;
  po.replicas_to_aggregate = 2;
  po.total_num_replicas = 3;  // one backup step a round
  po.timeout_seconds = 30;
  ParameterServerStrategy strategy(kolo::train::ClusterResolver::from_tf_config(), {}, po);
  auto net = make_net();
  strategy.create_variables(*net, kolo::train::SGD{.learning_rate = 0.1});
  Data data;
  std::int64_t j = 0;
  strategy.register_step("train", [&](const torch::Tensor&) {
    strategy.pull(*net);
    auto loss = loss_on(net, data, data.rows(strategy.task_index(), j++));
    loss.backward();
    // Worker 2 is slow: its gradients are often of parameters already updated.
    if (strategy.task_index() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(40));
    const bool accepted = strategy.push(*net);
    return torch::tensor({accepted ? 1.0 : 0.0, loss.item<double>()}, torch::kDouble);
  });
  if (!strategy.is_chief()) {
    strategy.join();
    return 0;
  }
  ClusterCoordinator coordinator(strategy);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 60; ++i) values.push_back(coordinator.schedule("train"));
  coordinator.join();
  int dropped = 0;
  for (auto& v : values) dropped += v.fetch()[0].item<double>() == 0 ? 1 : 0;
  strategy.pull(*net);
  for (const auto& p : net->parameters()) {
    if (!torch::isfinite(p).all().item<bool>()) return fail("a parameter is not finite");
  }
  std::cout << "backup: 60 steps with K=2 of 3 workers ran; " << dropped
            << " stale gradients dropped" << std::endl;
  // Each round of 3 steps applies 2 gradients on each shard: the third is a backup's,
  // dropped (a step counts as dropped when any of its shards dropped it).
  if (dropped < 20)
    return fail("expected a dropped gradient in every round (20), got " + std::to_string(dropped));
  std::cout << "PASS backup" << std::endl;
  return 0;
}

// --- faults: a worker killed mid-training ------------------------------------------------

int run_faults(int steps) {
  ParameterServerOptions po;
  po.timeout_seconds = 20;
  ParameterServerStrategy strategy(kolo::train::ClusterResolver::from_tf_config(), {}, po);
  auto net = make_net();
  strategy.create_variables(*net, kolo::train::SGD{.learning_rate = 0.05});
  Data data;
  std::int64_t j = 0;
  strategy.register_step("train", [&](const torch::Tensor& arg) {
    strategy.pull(*net);
    auto loss = loss_on(net, data, data.rows(strategy.task_index(), j++));
    loss.backward();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    strategy.push(*net);
    return torch::stack(
        {arg.to(torch::kDouble), torch::tensor(double(strategy.task_index()), torch::kDouble)});
  });
  if (!strategy.is_chief()) {
    std::cout << strategy.task_type() << " " << strategy.task_index() << " pid " << ::getpid()
              << std::endl;
    strategy.join();
    return 0;
  }
  ClusterCoordinator coordinator(strategy);
  std::vector<RemoteValue> values;
  for (int i = 0; i < steps; ++i)
    values.push_back(coordinator.schedule("train", torch::tensor(double(i))));
  coordinator.join();
  int retried = 0;
  for (int i = 0; i < steps; ++i) {
    const torch::Tensor r = values[i].fetch();
    if (r[0].item<double>() != i)
      return fail("step " + std::to_string(i) + " gave another step's result");
    if (values[i].attempts() > 1) ++retried;
  }
  std::cout << "faults: " << steps << " steps all ran; " << retried
            << " ran again after a worker was lost; " << coordinator.worker_failures()
            << " worker failures" << std::endl;
  if (coordinator.worker_failures() < 1)
    return fail("no worker failure was seen (was a worker killed?)");
  // The restarted worker comes back and takes steps.
  for (int i = 0; i < 300 && coordinator.workers_up() < workers_of(strategy); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (coordinator.workers_up() < workers_of(strategy))
    return fail("the restarted worker did not rejoin");
  std::set<int> ran_on;
  std::vector<RemoteValue> more;
  for (int i = 0; i < 40; ++i)
    more.push_back(coordinator.schedule("train", torch::tensor(double(i))));
  coordinator.join();
  for (auto& v : more) ran_on.insert(v.worker());
  std::cout << "faults: " << coordinator.worker_rejoins() << " rejoins; the last 40 steps ran on "
            << ran_on.size() << " workers" << std::endl;
  if (coordinator.worker_rejoins() < 1 || ran_on.size() < 2)
    return fail("the rejoined worker took no step");
  std::cout << "PASS faults" << std::endl;
  return 0;
}

// --- sparse: pushes of touched rows only ---------------------------------------------------

struct EmbedNetImpl : torch::nn::Cloneable<EmbedNetImpl> {
  EmbedNetImpl() { reset(); }
  void reset() override {
    torch::manual_seed(3);
    emb = register_module("emb",
                          torch::nn::Embedding(torch::nn::EmbeddingOptions(1000, 16).sparse(true)));
    out = register_module("out", torch::nn::Linear(16, 2));
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    return out->forward(emb->forward(ids).mean(1));
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear out{nullptr};
};
TORCH_MODULE(EmbedNet);

int run_sparse() {
  ParameterServerStrategy strategy(kolo::train::ClusterResolver::from_tf_config(),
                                   kolo::train::VariablePartitioner::fixed_shards(2));
  EmbedNet net;
  strategy.create_variables(*net, kolo::train::SGD{.learning_rate = 0.5});
  std::int64_t j = 0;
  strategy.register_step("train", [&](const torch::Tensor&) {
    torch::manual_seed(100 + j++);
    const torch::Tensor ids = torch::randint(0, 1000, {kBatch, 4}, torch::kLong);
    strategy.pull(*net, {{"emb.weight", ids}});
    auto loss = torch::nn::functional::cross_entropy(net->forward(ids), ids.select(1, 0) % 2);
    loss.backward();
    const std::uint64_t before = strategy.push_bytes_sent();
    strategy.push(*net);
    const double touched = static_cast<double>(std::get<0>(torch::_unique(ids.flatten())).numel());
    return torch::tensor({static_cast<double>(strategy.push_bytes_sent() - before), touched},
                         torch::kDouble);
  });
  if (!strategy.is_chief()) {
    strategy.join();
    return 0;
  }
  ClusterCoordinator coordinator(strategy);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 20; ++i) values.push_back(coordinator.schedule("train"));
  coordinator.join();
  const double row = 16 * 4, dense_other = (16 * 2 + 2) * 4, full = 1000 * row;
  for (auto& v : values) {
    const torch::Tensor r = v.fetch();
    const double bytes = r[0].item<double>(), touched = r[1].item<double>();
    // Touched rows' values and indices, the dense layer, and at most 1 KiB of framing.
    const double bound = touched * (row + 8) + dense_other + 1024;
    std::cout << "sparse push: " << bytes << " bytes for " << touched << " touched rows (bound "
              << bound << ", a dense push of the table alone is " << full << ")" << std::endl;
    if (bytes > bound) return fail("a sparse push sent more than its touched rows");
    if (bytes < touched * row) return fail("a sparse push sent less than its touched rows' values");
  }
  std::cout << "PASS sparse" << std::endl;
  return 0;
}

// --- checkpoint / restore: a dead ps named, the job restarted from the chief's checkpoint ---

int run_checkpoint(const std::string& dir, bool restore) {
  ParameterServerOptions po;
  po.timeout_seconds = std::atof(
      std::getenv("KOLO_PEER_TIMEOUT_SECONDS") ? std::getenv("KOLO_PEER_TIMEOUT_SECONDS") : "5");
  ParameterServerStrategy strategy(kolo::train::ClusterResolver::from_tf_config(),
                                   kolo::train::VariablePartitioner::fixed_shards(2), po);
  auto net = make_net();
  strategy.create_variables(*net, kolo::train::Adam{.learning_rate = 0.01});
  Data data;
  std::int64_t j = 0;
  strategy.register_step("train", [&](const torch::Tensor&) {
    strategy.pull(*net);
    loss_on(net, data, data.rows(strategy.task_index(), j++)).backward();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    strategy.push(*net);
    return torch::Tensor();
  });
  if (!strategy.is_chief()) {
    std::cout << strategy.task_type() << " " << strategy.task_index() << " pid " << ::getpid()
              << std::endl;
    strategy.join();
    return 0;
  }
  const std::string ckpt = dir + "/ps.ckpt", params = dir + "/params.pt";
  if (restore) {
    strategy.restore_checkpoint(ckpt);
    strategy.pull(*net);
    std::vector<torch::Tensor> saved;
    torch::load(saved, params);
    const auto now = net->parameters();
    double diff = 0;
    for (std::size_t i = 0; i < now.size(); ++i)
      diff = std::max(diff, (now[i] - saved[i]).abs().max().item<double>());
    std::cout << "restore: max |restored - checkpointed| = " << diff << std::endl;
    if (diff != 0) return fail("the restored parameters differ from the checkpoint's");
    ClusterCoordinator coordinator(strategy);
    for (int i = 0; i < 20; ++i) coordinator.schedule("train");
    coordinator.join();
    std::cout << "PASS restore" << std::endl;
    return 0;
  }
  ClusterCoordinator coordinator(strategy);
  {
    // A full disk (the temporary is /dev/full, where writes fail with ENOSPC): the save
    // fails saying so, the previous checkpoint stays as it was, no temporary is left.
    const auto bytes = [](const std::string& path) {
      std::ifstream in(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    strategy.save_checkpoint(ckpt);
    const std::string before = bytes(ckpt);
    if (::symlink("/dev/full", (ckpt + ".tmp").c_str()) != 0) return fail("cannot link /dev/full");
    try {
      strategy.save_checkpoint(ckpt);
      return fail("a save to a full disk succeeded");
    } catch (const kolo::Error& e) {
      if (std::string(e.what()).find("No space left on device") == std::string::npos) {
        return fail(std::string("a full disk's error does not say so: ") + e.what());
      }
    }
    if (::access((ckpt + ".tmp").c_str(), F_OK) == 0 || errno != ENOENT) {
      return fail("a failed save left its temporary file");
    }
    if (bytes(ckpt) != before) return fail("a failed save changed the previous checkpoint");
    std::cout << "full disk: refused, the previous checkpoint kept" << std::endl;
  }
  try {
    for (int round = 0; round < 100000; ++round) {
      for (int i = 0; i < 10; ++i) coordinator.schedule("train");
      coordinator.join();
      strategy.save_checkpoint(ckpt);
      strategy.pull(*net);
      torch::save(net->parameters(), params + ".tmp");
      std::rename((params + ".tmp").c_str(), params.c_str());
      if (round == 2) std::cout << "checkpointed" << std::endl;
    }
  } catch (const kolo::Error& e) {
    std::cout << "chief: " << e.what() << std::endl;
    return 3;
  }
  return fail("training never stopped (was the ps task killed?)");
}

// --- fit_loop: fit, then a coordinator loop, in one job ----------------------------------

int run_fit_loop() {
  namespace kt = kolo::train;
  ParameterServerStrategy strategy;
  torch::manual_seed(3);
  torch::nn::Linear net(10, 10);  // the tutorial's Dense(10)
  kt::Model model(net, strategy);
  model.compile(kt::SGD{.learning_rate = 0.01}, "mse");
  // The tutorial's data: x [10, 10], y [10] (one value an example, broadcast over the 10
  // outputs as Keras's compile does), read without end in batches of 64.
  torch::manual_seed(5);
  const torch::Tensor x = torch::rand({10, 10}), y = torch::rand({10});
  // The loop's own step, registered on every task before fit (a worker serves the steps
  // registered when fit starts): one batch of the worker's data, its size returned.
  strategy.register_step("custom", [&](const torch::Tensor&) {
    strategy.pull(*net);
    const torch::Tensor loss = (net->forward(x) - y.unsqueeze(-1)).square().mean();
    loss.backward();
    strategy.push(*net);
    return torch::tensor({x.size(0)}, torch::kLong);
  });
  kt::FitOptions fo;
  fo.epochs = 2;
  fo.steps_per_epoch = 5;
  fo.batch_size = 64;
  fo.verbose = 0;
  const kt::History history = model.fit(kt::Dataset::from_tensors(x, y), fo);
  if (!strategy.is_chief()) return 0;  // fit served the chief's steps until it ended
  const auto& loss = history.history.at("loss");
  if (loss.size() != 2 || !std::isfinite(loss[1])) return fail("fit's history is not 2 losses");
  std::cout << "fit: loss " << loss[0] << " then " << loss[1] << std::endl;
  ClusterCoordinator coordinator(strategy);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 8; ++i) values.push_back(coordinator.schedule("custom"));
  coordinator.join();
  std::set<int> workers;
  for (const RemoteValue& v : values) {
    if (v.fetch().item<std::int64_t>() != 10) return fail("a custom step's result is wrong");
    workers.insert(v.worker());
  }
  std::cout << "coordinator loop after fit: 8 steps on " << workers.size() << " workers"
            << std::endl;
  std::cout << "PASS fit_loop" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "sync") return run_sync(argc > 2 ? argv[2] : "sgd");
    if (mode == "backup") return run_backup();
    if (mode == "faults") return run_faults(argc > 2 ? std::atoi(argv[2]) : 200);
    if (mode == "sparse") return run_sparse();
    if (mode == "checkpoint" && argc > 2) return run_checkpoint(argv[2], false);
    if (mode == "restore" && argc > 2) return run_checkpoint(argv[2], true);
    if (mode == "fit_loop") return run_fit_loop();
  } catch (const std::exception& e) {
    // Not "FAIL": a worker's or ps task's expected error (the chief_dies test) is not a
    // failed check; the test reads the status and the message.
    std::cout << "error: " << e.what() << std::endl;
    return 1;
  }
  std::cerr
      << "usage: ps_job sync [sgd|adam] | faults STEPS | sparse | checkpoint DIR | restore DIR | "
         "fit_loop\n";
  return 2;
}
