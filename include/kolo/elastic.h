// Elastic training with libtorch: the training loop goes on while workers leave and join
// (kolorun --min-np MIN --max-np MAX). Horovod's elastic API (hvd.elastic.run, State,
// TorchState, ElasticSampler) in C++, without its known deadlock (horovod#3494).
//
//   kolo::init();
//   torch::optim::Adam adam(model->parameters(), 1e-3);
//   kolo::DistributedOptimizer opt(adam, *model);
//   kolo::ElasticSampler sampler(dataset_size);
//   auto loader = torch::data::make_data_loader(dataset, sampler, batch_size);
//   kolo::elastic::TorchState state(*model, opt, {{"epoch", 0}});
//   state.attach(sampler);
//   state.register_reset_callbacks({[&] { /* e.g. lr = base_lr * kolo::size() */ }});
//   kolo::elastic::run(state, [&](kolo::elastic::State&) {
//     for (; state.value("epoch") < epochs; ++state.value("epoch")) {
//       sampler.set_epoch(state.value("epoch"));
//       std::int64_t i = 0;
//       for (auto& batch : *loader) {
//         ... loss.backward(); opt.step();
//         sampler.record_batch(batch.data.size(0));
//         if (++i <= sampler.common_batches(batch_size) && i % 100 == 0) state.commit();
//       }
//       kolo::join();  // the ranks' shards may differ by one sample
//       state.commit();
//     }
//   });
//
// A failed worker makes every collective of the others throw kolo::WorkersChanged; run()
// then restores the last commit, waits for kolorun's next set of workers and calls the
// train function again, after sync() gave every worker (new ones too) the same state.
// Workers added by kolorun are noticed at the next commit() (HostsUpdatedInterrupt: no
// restore, the commit is the state). docs/elastic.md has the whole story.
//
// Not here: the runtime's generations (kolo::elastic in kolo.h, src/core), the launcher's
// side (kolorun), and checkpoint files (kolo/torch.h's save_archive: commits live in memory
// and are lost with the job).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "kolo/torch.h"

namespace kolo {

// --- ElasticSampler ---------------------------------------------------------------------------

// A libtorch sampler (for torch::data::make_data_loader) that shards an epoch over the
// workers of an elastic job and, after the workers changed, shards the rest of the epoch
// over the new ones: within an epoch no index is processed twice or skipped, counting the
// work of the last commit (work done after it is rolled back with the model and done
// again).
//
// The epoch's order is DistributedSampler's (the same permutation for the same seed and
// epoch; 0, 1, 2, ... without shuffle). After each reshard the indices not yet processed,
// in that order, are dealt round-robin over the ranks: rank r gets the r-th, (r + W)-th,
// ... so the shards differ by at most one sample (no padding, unlike Horovod's, which
// repeats samples to even them out). A rank may then have one batch more than another:
// call kolo::join() after the epoch's loop (the other ranks' allreduces of that last
// batch count this rank with zeros), and commit only in the batches every rank has
// (common_batches): a commit is collective. A DistributedOptimizer that broadcasts
// buffers (its default, for modules with buffers) cannot step while a rank has joined
// (broadcasts fail then): build it with broadcast_buffers = false, or skip the uneven
// last batch (i > common_batches) on every rank.
//
// What it remembers: the epoch, the set of the epoch's indices processed as of the last
// save_progress() (every rank's recorded prefix of its shard), and this rank's count of
// samples recorded since (record_batch). TorchState::attach makes the state's commit,
// restore and sync save, restore and sync it; a State of your own calls the *_progress
// functions the same way.
//
// Copies share everything (the DataLoader keeps a copy: record_batch on yours counts for
// it). Not thread-safe: call record_batch() and the rest from the training thread, as
// next() is called from it (DataLoader workers only load the indices next() returned).
// Memory: per sample of the dataset, 8 bytes (the epoch's order) and 2 (the processed
// set and its saved copy).
class ElasticSampler : public torch::data::samplers::Sampler<std::vector<std::size_t>> {
 public:
  // Shards over kolo::size() ranks as kolo::rank() when kolo is initialized (else 1 rank,
  // rank 0); TorchState::sync reshards over the current workers anyway.
  explicit ElasticSampler(std::int64_t dataset_size, bool shuffle = true, std::uint64_t seed = 0);
  ElasticSampler(const ElasticSampler&) = default;
  ElasticSampler& operator=(const ElasticSampler&) = default;

  // Starts epoch `epoch` (nothing processed, sharded over the current ranks) unless it is
  // the current epoch: then nothing changes, so a train function that runs again after a
  // reset (for e = state.value("epoch"); ...; set_epoch(e)) resumes the epoch rather than
  // starting it over. The first epoch is 0.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const;

  // This rank has processed (trained on) n more samples of its shard, in the order next()
  // gave them: call it after each optimizer step with the batch's size. Only recorded
  // samples count as processed at the next save_progress(), whatever next() handed out
  // (a DataLoader with workers asks for batches ahead). More than the shard holds is a
  // kolo::Error.
  void record_batch(std::int64_t n);
  std::int64_t recorded() const;  // samples recorded since the last reshard

  // This rank's shard of the epoch's rest (since the last reshard), recorded ones included.
  std::vector<std::int64_t> indices() const;
  std::int64_t shard_size() const;
  int num_replicas() const;
  int rank() const;
  // The epoch's indices not processed as of the last save_progress() (or reshard).
  std::int64_t remaining() const;
  // How many batches of batch_size every rank's shard holds (since the last reshard): the
  // i-th batch of a pass over the DataLoader (1-based) exists on every rank for
  // i <= common_batches(batch_size); only the last batch of some ranks lies beyond.
  std::int64_t common_batches(std::int64_t batch_size) const;

  // Re-shards the rest of the epoch over num_replicas ranks, this one being `rank`: the
  // epoch's indices not processed (as of the last save_progress(), or the progress last
  // loaded), in the epoch's order, dealt round-robin; recorded() starts at 0 again and
  // samples recorded since the last save_progress() are forgotten (Horovod's
  // ElasticSampler.reset()). sync_progress and restore_progress do this for you.
  void reshard(int num_replicas, int rank);

  // --- the elastic state (what TorchState::attach does) ---
  // Collective: allgathers every rank's recorded() and adds each rank's recorded prefix to
  // the processed set, which becomes the saved progress (what restore_progress returns
  // to). Every rank then holds the same progress. Nothing changes if the allgather throws.
  void save_progress();
  // The same with every rank's recorded() given (in rank order), without communicating.
  void save_progress(const std::vector<std::int64_t>& recorded_by_rank);
  // Back to the saved progress, resharded over the same ranks.
  void restore_progress();
  // Collective: root's progress (epoch and processed set) on every rank, resharded over
  // kolo::size() ranks. A sampler built with another dataset size, shuffle or seed than
  // root's is a kolo::Error naming both.
  void sync_progress(int root);
  // The epoch and processed set as bytes (what sync_progress broadcasts), and loading such
  // bytes, resharded over num_replicas ranks as `rank`; the loaded progress is also the
  // saved progress.
  std::string progress() const;
  void load_progress(const std::string& bytes, int num_replicas, int rank);

  // libtorch's Sampler interface. reset() (the DataLoader calls it at each begin()) makes
  // next() go on from the first sample of this rank's shard that was not recorded; it does
  // not start a new epoch (set_epoch does). A new_size other than the dataset size is a
  // kolo::Error. next(n) returns up to n indices, nullopt at the end of the shard.
  // save()/load() keep the progress (load() checks the dataset size, shuffle and seed) and
  // reshard over the current ranks.
  void reset(c10::optional<std::size_t> new_size = c10::nullopt) override;
  c10::optional<std::vector<std::size_t>> next(std::size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

namespace elastic {

// --- State -------------------------------------------------------------------------------------

// Thrown by State::commit() (check_host_updates) on every rank together when kolorun has a
// newer set of workers (hosts added, or removed by the discovery script); run() catches it
// and resets without restoring. Horovod's skip_sync is kept for code ported from it but
// only informs: kolo syncs after every reset (skipping it on some ranks but not on others
// is horovod#3494's deadlock), and is always false here.
class HostsUpdatedInterrupt : public std::exception {
 public:
  explicit HostsUpdatedInterrupt(bool skip_sync = false) : skip_sync_(skip_sync) {}
  bool skip_sync() const { return skip_sync_; }
  const char* what() const noexcept override;

 private:
  bool skip_sync_;
};

// What training must keep across a change of workers: an in-memory snapshot (save, at
// each commit), a way back to it (restore, after a failure) and a way to make every
// worker's copy the same (sync, after every reset and at the start).
//
// sync() is the same collective on every rank, survivors and newcomers alike: every rank
// allgathers the age of its state (commits(): the commit it holds; 0 for a new worker)
// and the lowest rank with the largest age is the root that every other rank copies. So
// a survivor always wins over a new worker, no rank skips the sync while others run it
// (horovod#3494), and a rank whose last commit finished while another's failed still
// provides the newer state.
class State {
 public:
  virtual ~State() = default;

  // save() then check_host_updates(): collective, call it on every rank at the same point
  // (e.g. every N batches). Throws HostsUpdatedInterrupt after saving when workers are to
  // be added or removed; kolo::WorkersChanged when a worker left (if the save had not
  // finished, the previous one stays).
  void commit();
  // The snapshot (save_state) and one more commit counted. May be collective
  // (TorchState's is when a sampler is attached): call it on every rank together, as
  // commit() does. commit() is save() and check_host_updates(); call these two yourself
  // to do something between them (e.g. log the commit).
  void save();
  // Collective (kolo::elastic::hosts_updated()): throws HostsUpdatedInterrupt on every rank
  // together when kolorun has a newer set of workers; nothing when the job is not elastic.
  void check_host_updates();
  // Back to the last snapshot (local): the last save(), or the last sync().
  void restore();
  // Collective: chooses the root as described above, makes every rank's state root's
  // (sync_from), then takes root's commit count.
  void sync();
  // The age of the state this rank holds: the number of saves (commits) it descends from,
  // its own or, after a sync, the root's. 0 until the first save; restore() keeps it.
  std::int64_t commits() const { return commits_; }

  // Each runs after every reset, in order, before sync(): e.g. set the learning rate for
  // the new kolo::size(). They run on the workers that were there before the reset, not
  // on new ones (those get the state, learning rate included, from sync()), so write
  // them to set a value from kolo::size() (lr = base * size) rather than to scale the one
  // they find. Adds to the callbacks registered before.
  void register_reset_callbacks(std::vector<std::function<void()>> callbacks);
  // Runs the reset callbacks (run() calls it after each reset).
  void on_reset();

 protected:
  // What a State of your own implements. save_state: the snapshot; it may communicate
  // (save() is called on every rank together) and must leave the previous snapshot intact
  // if it throws. restore_state: back to the snapshot, locally. sync_from: every rank's
  // state becomes root's (the same root on every rank), then a local snapshot of it is
  // taken, so that restore() before the next save returns to the synced state.
  virtual void save_state() = 0;
  virtual void restore_state() = 0;
  virtual void sync_from(int root) = 0;

 private:
  std::int64_t commits_ = 0;
  std::vector<std::function<void()>> callbacks_;
};

// The state of a libtorch model and its optimizer (Horovod's TorchState(model, optimizer,
// epoch=0, batch=0)), plus named integer values (epoch, batch, ...) and optionally an
// ElasticSampler.
//   save: a copy of every parameter and buffer of `model` (its submodules' too), of the
//         optimizer's state (libtorch's serialization, in memory) and options (learning
//         rate, betas, ...), of the values, and the sampler's save_progress().
//   restore: copies them back (the tensors in place, so references to them stay valid).
//   sync: root's parameters, buffers, optimizer state and options (broadcast_parameters,
//         broadcast_buffers, broadcast_optimizer_state), values and sampler progress.
// The optimizer may be a DistributedOptimizer (its state lives in the wrapped optimizer;
// both are kept). `model`, `optimizer` and an attached sampler must outlive the state. The
// constructor takes a first snapshot (what restore() returns to before the first commit).
class TorchState : public State {
 public:
  TorchState(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
             std::map<std::string, std::int64_t> values = {});
  ~TorchState() override;

  // The value `name` given to the constructor, to read or set; another name is a
  // kolo::Error listing the names there are.
  std::int64_t& value(const std::string& name);
  std::int64_t value(const std::string& name) const;
  const std::map<std::string, std::int64_t>& values() const { return values_; }

  // The sampler's progress is saved, restored and synced with the state from now on
  // (attaching takes a snapshot of it). One sampler per state; attaching another replaces it.
  void attach(ElasticSampler& sampler);

 protected:
  void save_state() override;
  void restore_state() override;
  void sync_from(int root) override;

 private:
  struct Snapshot;
  void snapshot_locally();  // save() without the sampler's collective part
  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  std::map<std::string, std::int64_t> values_;
  ElasticSampler* sampler_ = nullptr;
  std::unique_ptr<Snapshot> saved_;
};

// --- run ---------------------------------------------------------------------------------------

// Horovod's hvd.elastic.run: sync() then train(state), until train returns (true) or this
// worker is no longer part of the job (false: kolorun removed it or the job is ending; kolo
// is shut down, exit without using it). When train throws kolo::WorkersChanged (a worker
// left), the state is restored to the last commit; when it throws HostsUpdatedInterrupt
// (workers added or removed at a commit), it is not; either way kolo::elastic::reset()
// then joins the next set of workers (again, if forming that one fails with
// WorkersChanged), the reset callbacks run, and the loop goes on with sync(). Each reset
// is logged at info level with the sizes before and after. Other exceptions propagate.
// Use no collective before run() (a new worker's first one is sync()'s). Outside an
// elastic job: sync() and train(state) once.
bool run(State& state, const std::function<void(State&)>& train);

namespace detail {
// run()'s loop with the reset step given (kolo::elastic::reset in run()): for tests.
bool run(State& state, const std::function<void(State&)>& train,
         const std::function<bool()>& reset);
// sync()'s root: the lowest rank with the largest age (ages[r] = rank r's commits()).
int choose_sync_root(const std::vector<std::int64_t>& ages);
}  // namespace detail

}  // namespace elastic
}  // namespace kolo
