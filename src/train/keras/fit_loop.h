// Model::fit's epoch loop, shared by plain fit (fit.cc) and elastic fit (elastic_fit.cc):
// where training stands (FitPosition) and the loop that goes on from there, with the
// commit points an elastic fit needs.
//
// Not for: one step's work (fit.cc's detail::train_step), the elastic state and its
// snapshot (elastic_fit.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "train/keras/model_impl.h"
#include "train/strategies/strategy_impl.h"

namespace kolo::train {

// Where an epoch loop stands: the epoch, how many of its batches are done, and their
// metric state summed over every replica and worker (train_step's sums), so that the
// epoch's logs stay exact when the loop goes on from here.
struct FitPosition {
  int epoch = 0;
  std::int64_t step = 0;
  std::vector<double> totals;
};

// What commit points the loop has (elastic fit). kBatches: every commit_every batches of
// an epoch, not at its last one; kEpochBatches: after an epoch's last batch, before
// validation and on_epoch_end (so that they never redo batches); kEpochEnd: after
// on_epoch_end, the position already at the next epoch (so that no epoch ends twice).
enum class CommitPoint { kBatches, kEpochBatches, kEpochEnd };

struct FitLoop {
  FitLoop(Model::Impl& model, const FitOptions& options, WorkerInput input)
      : m(model), o(options), in(std::move(input)) {}
  Model::Impl& m;
  const FitOptions& o;
  WorkerInput in;  // the training data (every worker holds all of it: kData)
  std::optional<Dataset> validation;
  std::int64_t validation_batch = 0;
  CallbackList callbacks;
  // Elastic fit's commit; empty in plain fit.
  std::function<void(CommitPoint)> commit;
  // The last epoch whose on_epoch_begin ran in this process. Callbacks live in the
  // process, not in the state: an epoch resumed after a restore does not begin again here,
  // while a worker that joins mid-epoch begins it once.
  int begun = -1;
  Logs epoch_logs;  // the last epoch's (on_train_end's)

  // Runs epochs from `at` (its step-th batch of its epoch) until o.epochs or a stop;
  // `at` follows, so that a commit can take it.
  void run(FitPosition& at);
};

// The elastic fit (elastic_fit.cc): loop.run inside kolo::elastic::run over a state
// holding the model, its optimizer and `at`. false: kolorun removed this worker (kolo is
// shut down).
bool fit_elastic(FitLoop& loop, FitPosition& at);

namespace detail {
// For tests: with a reset given, elastic fit runs kolo::elastic::detail::run with it as the
// step that joins the next set of workers (kolo::elastic::reset in a job), even outside an
// elastic job, so that one process can throw kolo::WorkersChanged from a callback and see
// fit restore and go on. nullptr: the real run(). Not thread-safe: set it between fits.
void set_elastic_reset_for_testing(std::function<bool()> reset);
}  // namespace detail

}  // namespace kolo::train
