// Elastic fit (FitOptions::elastic, model.h): fit's epoch loop inside kolo::elastic::run,
// over a state that holds what the loop needs to go on after a change of workers.
//
// FitState is a TorchState over replica 0's module and the optimizer (the
// DistributedOptimizer with one replica per worker), with the position of the loop as its
// values (epoch, batch, the optimizer's iteration count, the model's collective-name
// counter, so that every worker names its next collective alike, and whether training
// stops, so that a sync leaves every worker with the chief's answer) plus the epoch's
// metric sums. Every replica of a process holds replica 0's weights: restore and sync copy them
// on. The data needs no state of its own: batch s of an epoch is the same examples for
// any number of workers (fit's batch is global; data.h), so the loop goes on at the
// committed batch over the workers there are.
//
// Not for: the loop (fit.cc), the runtime's generations and elastic::run (src/core,
// src/torch/elastic.cc).
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "kolo/elastic.h"
#include "kolo/error.h"
#include "train/keras/fit_loop.h"

namespace kolo::train {
namespace {

std::function<bool()>& reset_for_testing() {
  static std::function<bool()> reset;
  return reset;
}

torch::optim::Optimizer& live_optimizer(Model::Impl& m) {
  if (m.distributed) return *m.distributed;
  return *m.optimizer;
}

class FitState : public elastic::TorchState {
 public:
  FitState(Model::Impl& m, FitPosition& at)
      : TorchState(*m.replicas[0], live_optimizer(m),
                   {{"epoch", at.epoch},
                    {"step", at.step},
                    {"iterations", m.iterations},
                    {"ops", static_cast<std::int64_t>(m.ops)},
                    {"stop", m.stop ? 1 : 0}}),
        m_(m),
        at_(at),
        saved_totals_(at.totals) {}

 protected:
  void save_state() override {
    put_position();
    TorchState::save_state();
    saved_totals_ = at_.totals;
  }

  void restore_state() override {
    TorchState::restore_state();
    take_position();
    at_.totals = saved_totals_;
    m_.copy_to_replicas();
  }

  void sync_from(int root) override {
    // The live position is the snapshot's here (run() syncs after a restore, or at the
    // commit that saw new workers): root's goes to every rank.
    put_position();
    TorchState::sync_from(root);
    take_position();
    torch::Tensor totals = torch::tensor(at_.totals, torch::kFloat64);
    totals = kolo::broadcast(totals, {.name = "train.elastic.totals", .root = root});
    at_.totals.assign(totals.data_ptr<double>(), totals.data_ptr<double>() + totals.numel());
    saved_totals_ = at_.totals;
    m_.copy_to_replicas();
  }

 private:
  void put_position() {
    value("epoch") = at_.epoch;
    value("step") = at_.step;
    value("iterations") = m_.iterations;
    value("ops") = static_cast<std::int64_t>(m_.ops);
    value("stop") = m_.stop ? 1 : 0;
  }
  void take_position() {
    at_.epoch = static_cast<int>(value("epoch"));
    at_.step = value("step");
    m_.iterations = value("iterations");
    m_.ops = static_cast<std::uint64_t>(value("ops"));
    m_.stop = value("stop") != 0;
  }

  Model::Impl& m_;
  FitPosition& at_;
  std::vector<double> saved_totals_;
};

}  // namespace

bool fit_elastic(FitLoop& loop, FitPosition& at) {
  Model::Impl& m = loop.m;
  at.totals.assign(static_cast<std::size_t>(m.state_size), 0.0);
  FitState state(m, at);
  state.register_reset_callbacks(loop.o.elastic.reset_callbacks);
  loop.commit = [&](CommitPoint point) {
    state.save();
    if (point == CommitPoint::kEpochEnd) {
      // Whether training stops (EarlyStopping): the chief's word, as a worker that joined
      // later has callbacks with a shorter memory. After the save, so that a failure here
      // does not end the epoch a second time.
      torch::Tensor stop = torch::tensor({m.stop ? 1 : 0}, torch::kInt32);
      stop = kolo::broadcast(stop, {.name = "train.elastic.stop", .root = 0});
      m.stop = stop.item<int>() != 0;
    }
    state.check_host_updates();
  };
  const auto train = [&](elastic::State&) { loop.run(at); };
  const bool member = reset_for_testing() ? elastic::detail::run(state, train, reset_for_testing())
                                          : elastic::run(state, train);
  loop.commit = nullptr;
  return member;
}

namespace detail {
void set_elastic_reset_for_testing(std::function<bool()> reset) {
  reset_for_testing() = std::move(reset);
}
}  // namespace detail

}  // namespace kolo::train
