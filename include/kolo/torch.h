// kolo for libtorch: collectives on torch::Tensor, DistributedOptimizer, broadcasts of
// parameters, optimizer state and objects, checksummed checkpoint files, a distributed
// sampler and an IDX loader.
//
//   kolo::init();
//   auto device = kolo::device();                    // cuda:<local_rank> or cpu
//   torch::optim::Adam adam(model->parameters(), 1e-3 * kolo::size());
//   kolo::DistributedOptimizer opt(adam, *model);   // also keeps buffers at rank 0's
//   kolo::broadcast_parameters(model->named_parameters(), 0);
//   kolo::broadcast_optimizer_state(adam, 0);
//   kolo::DistributedSampler sampler(dataset_size, kolo::size(), kolo::rank());
//   auto loader = torch::data::make_data_loader(dataset, sampler, options);
//   for (epoch ...) for (auto& batch : *loader) { ... loss.backward(); opt.step(); }
//   kolo::shutdown();
//
// Works with Debian's libtorch 1.13 and libtorch 2.x. CUDA tensors: in a kolo built with
// KOLO_DEVICE_PATH (kolo::has_device_path()), every collective takes them as they are,
// through NCCL on kolo's own stream (see TorchHandle::wait()), and allgather's, alltoall's
// and reducescatter's results are tensors on the same GPU; in a kolo without it they are
// staged through host memory. Every function here
// acts on the default runtime started by kolo::init().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "kolo/kolo.h"

namespace kolo {

// --- tensors -------------------------------------------------------------------------------

DataType to_kolo_dtype(torch::ScalarType type);  // throws kolo::Error for unsupported types
torch::ScalarType to_torch_dtype(DataType dtype);

// cuda:<local_rank> when CUDA devices exist (and makes it the current device), else cpu.
torch::Device device();
// The device a program's `--device` names: "auto" (device() above), "cpu", "cuda"
// (cuda:<local_rank % the visible GPUs>) or "cuda:N"; a CUDA one becomes the current
// device. Throws kolo::Error (kInvalidArgument) naming the choice, the rank and what this
// process sees, for another text or for a GPU it cannot see (none visible, or N too large).
torch::Device device(const std::string& choice);

// Result of an asynchronous collective on torch tensors. wait() blocks, copies results
// back (host staging, non-contiguous or in-place targets) and returns the output.
//
// CUDA tensors on the device path (kolo::has_device_path()) follow c10d's Work semantics
// for NCCL. Submitting records an event on the tensor's
// device's current stream, and kolo's stream waits for it, so the collective reads what
// was enqueued before the call, without the host waiting. wait() blocks the host only
// until the work is enqueued (all ranks negotiated it), then makes the current stream
// wait for kolo's work: what the caller enqueues afterwards on that stream sees the
// result; the host does not wait for the GPU (synchronize the stream or read the tensor
// on the host for that). Call wait() with the same current stream as the submit, or order
// other streams yourself. kolo keeps the tensors alive until its stream has finished
// with them, also when the handle is dropped. A failure of the device work after wait()
// (a dead peer, NCCL's async error) ends the runtime within KOLO_PEER_TIMEOUT_SECONDS:
// the next kolo call throws it. poll() says whether the work was enqueued, not finished.
class TorchHandle {
 public:
  TorchHandle() = default;
  TorchHandle(Handle handle, std::function<torch::Tensor()> finish)
      : handle_(std::move(handle)), state_(std::make_shared<State>()) {
    state_->finish = std::move(finish);
  }
  bool poll() const { return handle_.poll(); }
  // Throws kolo::Error if the operation failed. Idempotent; copies of a handle share the
  // result (wait() on any of them returns the same tensor).
  torch::Tensor wait();
  const Handle& handle() const { return handle_; }
  const std::vector<std::int64_t>& received_splits() const { return handle_.received_splits(); }

 private:
  struct State {
    std::function<torch::Tensor()> finish;  // builds the result after completion
    torch::Tensor result;
    bool finished = false;
  };
  Handle handle_;
  std::shared_ptr<State> state_;
};

// Out-of-place forms return a new tensor; the `_` forms write into `tensor` (Horovod's
// in-place ops). allreduce, allgather and broadcast are differentiable: the gradient of
// an allreduce is the allreduce of the gradient (same op), the gradient of an allgather
// is this rank's rows of the averaged gradient, and of a broadcast the averaged gradient
// on the root (zeros elsewhere), as in Horovod; grouped_allreduce is differentiable like
// allreduce. The `_` forms count as in-place writes for autograd (a tensor saved for a
// backward pass and then overwritten makes that backward pass fail, as with torch's own
// in-place ops). An unsupported dtype is a kolo::Error naming the tensor. Backward passes
// run on the forward's process set (options.process_set), as in Horovod.
torch::Tensor allreduce(const torch::Tensor& tensor, const AllreduceOptions& options = {});
void allreduce_(torch::Tensor& tensor, const AllreduceOptions& options = {});
TorchHandle allreduce_async(const torch::Tensor& tensor, const AllreduceOptions& options = {});
TorchHandle allreduce_async_(torch::Tensor& tensor, const AllreduceOptions& options = {});

std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& tensors,
                                             const AllreduceOptions& options = {});

torch::Tensor allgather(const torch::Tensor& tensor, const AllgatherOptions& options = {});
TorchHandle allgather_async(const torch::Tensor& tensor, const AllgatherOptions& options = {});

torch::Tensor broadcast(const torch::Tensor& tensor, const BroadcastOptions& options = {});
void broadcast_(torch::Tensor& tensor, const BroadcastOptions& options = {});
TorchHandle broadcast_async_(torch::Tensor& tensor, const BroadcastOptions& options = {});

struct TorchAlltoallResult {
  torch::Tensor output;
  std::vector<std::int64_t> received_splits;
};
TorchAlltoallResult alltoall(const torch::Tensor& tensor, const AlltoallOptions& options = {});

torch::Tensor reducescatter(const torch::Tensor& tensor, const ReducescatterOptions& options = {});

// --- parameters, optimizer state, objects ---------------------------------------------------

using NamedTensors = torch::OrderedDict<std::string, torch::Tensor>;

// Overwrites every parameter with root's values (in place, without autograd).
void broadcast_parameters(const NamedTensors& named_parameters, int root = 0);
// Makes every rank's optimizer state (state tensors, step counts) and options (learning
// rate, betas, ...) equal to root's, through libtorch's optimizer serialization: a rank's
// own state is dropped first, and root's state tensors are loaded onto the device of this
// rank's first parameter (e.g. cuda:<local_rank>, not root's GPU).
void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root = 0);

// Root's bytes on every rank. With a process set (its id(), as the collectives' option),
// among its members only: root is a rank of the job and a member (Horovod's
// broadcast_object(obj, root_rank, name, process_set)).
std::string broadcast_object(const std::string& bytes, int root = 0, const std::string& name = "",
                             int process_set = kGlobalProcessSet);
// Every rank's bytes, in rank order (of the set's members, with a process set).
std::vector<std::string> allgather_object(const std::string& bytes, const std::string& name = "",
                                          int process_set = kGlobalProcessSet);
// Values libtorch can serialise (tensors, numbers, strings, lists, dicts of those).
torch::IValue broadcast_object(const torch::IValue& value, int root = 0,
                               const std::string& name = "", int process_set = kGlobalProcessSet);
std::vector<torch::IValue> allgather_object(const torch::IValue& value,
                                            const std::string& name = "",
                                            int process_set = kGlobalProcessSet);

// --- DistributedOptimizer -------------------------------------------------------------------

struct DistributedOptimizerOptions {
  ReduceOp op = ReduceOp::kAverage;              // kAverage or kSum across ranks
  int backward_passes_per_step = 1;              // local accumulation: communicate on the last pass
  Compression compression = Compression::kNone;  // wire format of gradients
  double gradient_predivide_factor = 1.0;  // with kAverage: divide by f before, by size/f after
  // Tensor names are prefix + parameter name. Two DistributedOptimizers alive at once (a
  // GAN's generator and discriminator) need prefixes that keep their names apart.
  std::string name_prefix = "grad.";
  // A sparse gradient (Embedding with sparse=true) is made dense and reduced as such
  // (Horovod's sparse_as_dense); false: such a gradient is an error naming the parameter.
  bool sparse_as_dense = false;
  // Only for the constructor that takes a module: every step() also broadcasts the
  // module's buffers (BatchNorm running statistics) from rank 0, as PyTorch's DDP does by
  // default (before each forward), so that they do not drift apart across ranks. false:
  // each rank keeps its own buffers (Horovod's behaviour).
  bool broadcast_buffers = true;
  // The ranks that average their gradients (a ProcessSet's id(), Horovod's
  // DistributedOptimizer(process_set=...)): kAverage divides by the set's size, and the
  // buffers come from the set's first rank. Only members may construct it (others get a
  // kolo::Error at construction); each set's members train their own replica.
  int process_set = kGlobalProcessSet;
};

// Wraps any torch::optim::Optimizer. Gradients are allreduced in place in .grad as each
// one is accumulated during backward (overlapping communication with the rest of
// backward); step() waits for them and runs the wrapped optimizer. A backward pass beyond
// backward_passes_per_step before step() is an error (it would change a .grad whose
// allreduce is running). Parameters that
// got no gradient in a step are reduced as zeros so ranks never diverge or hang.
// Every rank must wrap the same named parameters; a parameter can belong to one live
// DistributedOptimizer only, and two live ones must not produce the same tensor name
// (see name_prefix): both are errors at construction. Not thread-safe.
//
// It is a torch::optim::Optimizer itself, so code written for one takes it: learning-rate
// schedulers (torch::optim::StepLR(opt, ...)), a train function taking Optimizer&,
// torch::save(opt, path). Its param_groups() are copies of the wrapped optimizer's (same
// parameter tensors): a learning rate set on them (by a scheduler, say) reaches the
// wrapped optimizer at the next step(), and step() then copies back the wrapped
// optimizer's options, so changes made directly on the wrapped one also show. state()
// is empty: the state lives in the wrapped optimizer (save()/load() and
// broadcast_optimizer_state() act on it). libtorch's Optimizer::zero_grad() is not
// virtual: through an Optimizer& the base version runs, which is right at the start of a
// step, but a step skipped after backward() needs this class's zero_grad() (the error
// that follows otherwise says so).
class DistributedOptimizer : public torch::optim::Optimizer {
 public:
  DistributedOptimizer(torch::optim::Optimizer& optimizer, const NamedTensors& named_parameters,
                       DistributedOptimizerOptions options = {});
  // The module's named parameters and, with options.broadcast_buffers (the default), its
  // buffers: kept equal to rank 0's by every step(). Forwards in training mode after a
  // step (e.g. a GAN discriminator's forward while the generator trains) update them
  // locally again until the next step(); call kolo::broadcast_buffers() before evaluating
  // if that matters.
  DistributedOptimizer(torch::optim::Optimizer& optimizer, torch::nn::Module& module,
                       DistributedOptimizerOptions options = {});
  ~DistributedOptimizer() override;
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Waits for every gradient's allreduce and writes the results into .grad. If any failed
  // (a kolo::Error naming the tensor, e.g. shapes that differ between ranks), it still
  // waits for all the others, leaves the failed .grad as this rank's own gradient, resets
  // for the next step, and then throws the first error; step() then does not update.
  void synchronize();
  // synchronize() (unless skipped, see below, or already called since the last backward
  // pass) then the wrapped optimizer's step(); with a module and broadcast_buffers, also
  // the buffers' broadcast. A closure (libtorch's LossClosure: zero_grad, forward,
  // backward, return the loss) is called once, first; its loss is returned (else an
  // undefined tensor). Optimizers that evaluate the loss several times per step (LBFGS)
  // cannot be wrapped.
  torch::Tensor step(LossClosure closure = nullptr) override;
  // Zeroes the wrapped optimizer's gradients. After backward() without step() (skipping a
  // step, e.g. on a NaN loss) it first discards the step's reductions: their allreduces
  // already run with the other ranks and cannot be withdrawn, so it submits the remaining
  // gradients as synchronize() would, waits for all of them (bounded like any operation:
  // peer timeout, stall shutdown), drops the results and resets, and the next backward()
  // and step() run normally. If a reduction failed it still zeroes and resets, then throws
  // the kolo::Error naming the tensor. Skip on every rank or on none (decide together, e.g.
  // from an allreduce of the loss): a rank that skips alone still sends its gradients to
  // the others' step, so nobody hangs, but the replicas differ from then on. Before the
  // last of backward_passes_per_step passes (nothing sent yet) it restarts the count.
  // (Hides Optimizer::zero_grad, which is not virtual; see the class comment.)
  void zero_grad();
  // The wrapped optimizer's state (and options), after passing on a learning rate set
  // on this object's param_groups().
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  torch::optim::Optimizer& optimizer() { return optimizer_; }

  // While the returned guard lives, step() does not synchronize: call synchronize()
  // yourself first, e.g. to clip gradients between the two.
  class SkipSynchronize {
   public:
    explicit SkipSynchronize(DistributedOptimizer& o) : o_(o) { o_.skip_sync_ = true; }
    ~SkipSynchronize() { o_.skip_sync_ = false; }

   private:
    DistributedOptimizer& o_;
  };
  [[nodiscard]] SkipSynchronize skip_synchronize() { return SkipSynchronize(*this); }

  // When the gradient allreduces of the last synchronize() were enqueued and started,
  // in parameter order (for tests of overlap and for diagnostics).
  std::vector<Handle::Times> last_times() const;

 private:
  struct Param;
  void ensure_hooks();
  // The tensor hook: counts the pass; returns a replacement for `incoming` or undefined.
  torch::Tensor before_accumulation(Param& p, const torch::Tensor& incoming);
  void after_accumulation(Param& p);
  void submit(Param& p, torch::Tensor& grad);
  // Learning rates set on param_groups() go to the wrapped optimizer; its options come
  // back as copies.
  void share_options();
  std::vector<TorchHandle> broadcast_buffers_async();
  int workers() const { return set_.id() < 0 ? kolo::size() : set_.size(); }  // that average
  friend void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root);

  torch::optim::Optimizer& optimizer_;
  DistributedOptimizerOptions options_;
  std::vector<std::unique_ptr<Param>> params_;
  NamedTensors buffers_;              // with a module and broadcast_buffers
  std::vector<double> shared_lrs_;    // per group: the learning rate at the last share_options
  std::vector<std::string> claimed_;  // tensor names this optimizer holds (unique per process)
  ProcessSet set_;                    // options_.process_set, as at construction
  bool skip_sync_ = false;
  bool synchronized_ = false;  // synchronize() ran and no backward pass since
  std::vector<Handle::Times> last_times_;
};

// Overwrites every buffer of `module` (BatchNorm running statistics, ...) with root's,
// as PyTorch's DDP does before each forward. A DistributedOptimizer built from the module
// does this at every step() (DistributedOptimizerOptions::broadcast_buffers).
void broadcast_buffers(const torch::nn::Module& module, int root = 0);

// --- GradScaler (mixed precision) ------------------------------------------------------------

// torch.amp.GradScaler's dynamic loss scaling, with its defaults, for training in float16
// (where small gradients underflow): scale(loss).backward(), then step(optimizer) unscales
// the gradients and runs the optimizer unless one of them is inf or NaN, and update()
// lowers the scale after such a step (backoff_factor) or raises it after growth_interval
// steps without one (growth_factor).
//
// With a DistributedOptimizer, step() and unscale_() first wait for the gradients'
// reduction (synchronize()) and check the reduced gradients: an inf or NaN on any rank is
// in every rank's reduced gradient (a sum or an average keeps it), and every rank holds
// the same reduced bits, so every rank skips the same steps and keeps the same scale
// without a collective of its own, and the replicas never differ. With a plain
// torch::optim::Optimizer it checks this process's gradients only.
struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() and unscale_() do nothing, step() always steps
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  // loss * scale (the loss itself when disabled).
  torch::Tensor scale(const torch::Tensor& loss) const;
  // Divides the optimizer's gradients by the scale (once per step: call it before
  // clipping, as torch's) and records whether any is inf or NaN. Throws kolo::Error when
  // called twice before update().
  void unscale_(DistributedOptimizer& optimizer);
  void unscale_(torch::optim::Optimizer& optimizer);
  // unscale_() unless done, then the optimizer's step() unless a gradient was inf or NaN.
  // Returns whether it stepped. (A skipped DistributedOptimizer step leaves its reduced
  // gradients in .grad: zero_grad() as usual before the next backward pass.)
  bool step(DistributedOptimizer& optimizer);
  bool step(torch::optim::Optimizer& optimizer);
  // Adjusts the scale for the next step (after every step(), as torch's).
  void update();
  double get_scale() const { return options_.enabled ? scale_ : 1.0; }
  std::int64_t growth_tracker() const { return growth_tracker_; }
  // For checkpoints: the scale and the growth tracker (torch's state_dict keys).
  torch::Dict<std::string, double> state_dict() const;
  void load_state_dict(const torch::Dict<std::string, double>& state);

 private:
  void unscale_params(const std::vector<torch::Tensor>& params);
  GradScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
  bool unscaled_ = false;   // since the last update()
  bool found_inf_ = false;  // in the gradients unscaled since the last update()
};

// --- SyncBatchNorm --------------------------------------------------------------------------

// torch.nn.SyncBatchNorm's semantics (and Horovod's SyncBatchNorm): batch normalization
// whose training-mode statistics are those of the whole global batch, over the ranks of a
// process set. Forward allreduces each channel's sum, sum of squares and element count
// (float64), so ranks may hold different batch sizes (an empty one included); backward
// allreduces the two gradient sums the input's gradient needs. The weight's and bias's
// gradients are this rank's own, as torch's: DistributedOptimizer averages them like any
// other parameter. Running statistics use the unbiased global variance. In eval mode
// nothing is communicated: the running statistics normalize (without
// track_running_stats, the global batch's statistics, as in training). Every rank of the set must
// run forward and backward of each SyncBatchNorm in training mode (they are collectives). Input:
// (N, C), (N, C, L), (N, C, H, W) or (N, C, D, H, W).
struct SyncBatchNormOptions {
  /* implicit */ SyncBatchNormOptions(std::int64_t features) : num_features(features) {}
  std::int64_t num_features;
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch statistic
  bool affine = true;     // a learned weight (ones) and bias (zeros)
  // false: always the batch statistics (also in eval mode), no running statistics.
  bool track_running_stats = true;
  int process_set = kGlobalProcessSet;
  // Names the layer's collectives (every rank the same); "": "syncbn.<n>", n counting the
  // SyncBatchNorms this process made (the same on every rank that builds the same model).
  std::string name = {};
};

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(SyncBatchNormOptions options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);

  SyncBatchNormOptions options;
  torch::Tensor weight, bias;  // parameters (undefined without affine)
  torch::Tensor running_mean, running_var, num_batches_tracked;  // buffers (with tracking)
};
TORCH_MODULE(SyncBatchNorm);

// torch.nn.SyncBatchNorm.convert_sync_batchnorm: replaces every BatchNorm1d/2d/3d below
// `module` (its descendants; not `module` itself) held in a torch::nn::Sequential or
// ModuleList by a SyncBatchNorm with the same options, parameters and running statistics,
// named "syncbn.<path>" after its place in the module tree. Returns how many it replaced.
// A BatchNorm in a field of a module of your own cannot be swapped (libtorch modules
// call their children through their own fields): that is a kolo::Error naming its path
// (construct a SyncBatchNorm there). Call it on every rank, before making the optimizer
// (the new layers' parameters are new tensors).
int convert_sync_batchnorm(torch::nn::Module& module, int process_set = kGlobalProcessSet);

// --- checkpoint files -----------------------------------------------------------------------

// save_archive writes `archive` (libtorch's serialization) with a header holding its length
// and CRC-32, first to `path + ".tmp"`, flushed to disk, then renamed over `path`: a crash
// leaves the previous file or the new one, never part of one. Call it on one rank.
// load_archive reads such a file and refuses it if it is truncated, damaged (the checksum
// does not match), not a kolo checkpoint, or a plain libtorch archive without the header;
// every error is a kolo::Error naming the file and what to do. `device` as for
// InputArchive::load_from (where the tensors go; default: where they were saved from).
void save_archive(torch::serialize::OutputArchive& archive, const std::string& path);
void load_archive(torch::serialize::InputArchive& archive, const std::string& path,
                  const c10::optional<torch::Device>& device = c10::nullopt);
// Throws a kolo::Error naming `path` unless save_archive can write it (creates and removes
// its temp file): to refuse a bad checkpoint path before training rather than after.
void check_archive_writable(const std::string& path);

// --- data -----------------------------------------------------------------------------------

// Indices of this rank's shard for one epoch: a permutation of [0, size) from
// `seed + epoch` (the same on every rank), split round-robin across ranks. With
// drop_last the shard sizes are equal (the remainder is dropped); without it, the first
// size % ranks ranks get one more index (use kolo::join() for the remainder).
//
// It is also a libtorch sampler, for torch::data::make_data_loader(dataset, sampler,
// options). The DataLoader keeps its own copy and calls reset() at every begin(), i.e.
// once per epoch; each reset() starts the next epoch, so every epoch is reshuffled even
// if the program never calls set_epoch() (forgetting PyTorch's sampler.set_epoch(e) is a
// classic bug: every epoch repeats the first one's order). Copies share the epoch, so
// set_epoch(e) on the sampler you keep also sets the DataLoader's copy: the next reset()
// then uses epoch e (e.g. the epoch to resume from) and later ones e + 1, e + 2, ...
// The first reset() uses the epoch set so far (0 by default). Each copy has its own
// position within the epoch. Call set_epoch() between epochs, not while a DataLoader
// iterates (not thread-safe). save()/load() keep the epoch and the position.
class DistributedSampler : public torch::data::samplers::Sampler<std::vector<std::size_t>> {
 public:
  DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     std::uint64_t seed = 0, bool drop_last = true);
  // Copies share the epoch (see above); there is no separate move, so a moved-from
  // sampler stays usable and still shares it.
  DistributedSampler(const DistributedSampler&) = default;
  DistributedSampler& operator=(const DistributedSampler&) = default;

  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const { return shared_->epoch; }
  // This rank's indices for the current epoch (what one epoch of next() yields).
  std::vector<std::int64_t> indices() const;
  std::int64_t shard_size() const;

  // libtorch's Sampler interface. reset() starts the next epoch as described above (a
  // new size, if given, applies to this copy). next(n) returns up to n of this epoch's
  // indices, nullopt once they are used up; a next() before any reset() starts the
  // first epoch. save()/load() keep the epoch and position (load() checks that the
  // archive was saved by a sampler of the same size, ranks and seed); after load(), the
  // next reset() starts the epoch after the saved one.
  void reset(c10::optional<std::size_t> new_size = c10::nullopt) override;
  c10::optional<std::vector<std::size_t>> next(std::size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  struct Epoch {
    std::int64_t epoch = 0;
    bool chosen = false;   // set_epoch() since the last reset(): that reset uses it as is
    bool started = false;  // a reset() ran: the next one advances
  };
  void start_epoch();
  std::int64_t size_;
  int replicas_, rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::shared_ptr<Epoch> shared_ = std::make_shared<Epoch>();
  std::vector<std::int64_t> current_;  // this copy's indices of the epoch next() serves
  std::size_t position_ = 0;
  bool primed_ = false;  // current_ holds an epoch
};

// An MNIST-format IDX file (gzipped or not): images as float32 [N, 1, rows, cols] in
// [0, 1], labels as int64 [N]. Throws kolo::Error naming the file on bad input.
torch::Tensor load_idx_images(const std::string& path);
torch::Tensor load_idx_labels(const std::string& path);

// An images file and its labels file, loaded as above and checked to belong together:
// as many labels as images (else a kolo::Error naming both files and both counts, rather
// than training on a prefix) and every label in [0, num_classes) (else an error naming
// the labels file, the first bad label and its index). An empty pair loads (0 images);
// whether that is usable is the caller's decision.
struct IdxDataset {
  torch::Tensor images;  // float32 [N, 1, rows, cols]
  torch::Tensor labels;  // int64 [N]
};
IdxDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                            std::int64_t num_classes);

}  // namespace kolo
