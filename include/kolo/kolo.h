// kolo: named-tensor collectives for data-parallel training across processes and hosts.
//
//   kolo::init();                        // rank/size from kolorun, mpirun or Slurm
//   std::vector<float> g(n);
//   kolo::allreduce(view_of(g), view_of(g), {.name = "grad.w"});   // average across ranks
//   kolo::shutdown();
//
// Every collective is identified by a name. Ranks may submit operations in different
// orders: kolo's background thread negotiates which named operations every rank has
// submitted and runs them in the same order everywhere. Mismatched submissions (shape,
// dtype, op, root, scale factors, device) fail on every rank with an error naming the
// tensor, the ranks and the values; the job can go on. A rank that dies makes the others'
// operations fail within KOLO_PEER_TIMEOUT_SECONDS instead of hanging.
//
// The free functions below act on one default runtime in the process. Their options are
// plain structs: every field has the default shown.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kolo/error.h"
#include "kolo/handle.h"
#include "kolo/types.h"

namespace kolo {

// --- process sets ------------------------------------------------------------------------
// A process set is a subset of the job's ranks that runs collectives among themselves, with
// its own negotiation and response cache, concurrently with other sets (Horovod's dynamic
// process sets). Every collective's `process_set` option takes a set's id(); the default
// is the global set of all ranks. docs/process_sets.md has the details.
inline constexpr int kGlobalProcessSet = 0;

// What add_process_set returned (or global_process_set()): a plain value, cheap to copy.
// Removing the set does not change copies; operations on a removed set fail.
class ProcessSet {
 public:
  ProcessSet() = default;  // no set: id() is -1
  ProcessSet(int id, std::vector<int> ranks, int rank)
      : id_(id), ranks_(std::move(ranks)), rank_(rank) {}

  int id() const { return id_; }                            // pass as the `process_set` option
  const std::vector<int>& ranks() const { return ranks_; }  // the job's ranks, ascending
  int size() const { return static_cast<int>(ranks_.size()); }
  int rank() const { return rank_; }  // this process's index in ranks(); -1 if not a member
  bool included() const { return rank_ >= 0; }

 private:
  int id_ = -1;
  std::vector<int> ranks_;
  int rank_ = -1;
};

struct AllreduceOptions {
  std::string name = {};             // "" = deterministic "allreduce.noname.<n>"
  ReduceOp op = ReduceOp::kAverage;  // Horovod's default
  double prescale_factor = 1.0;      // multiplies the input before the reduction
  double postscale_factor = 1.0;     // multiplies the result (after averaging)
  int process_set = kGlobalProcessSet;
  // kFP16/kBF16: float32/float64 tensors are reduced as float16/bfloat16 (half the
  // bytes; sums lose precision). Every rank must pass the same value.
  Compression compression = Compression::kNone;
};

struct AllgatherOptions {
  std::string name = {};  // "" = "allgather.noname.<n>"
  int process_set = kGlobalProcessSet;
  OutputAllocator output = {};  // device memory on the device path only (types.h)
};

struct BroadcastOptions {
  std::string name = {};                // "" = "broadcast.noname.<n>"
  int root = 0;                         // rank of the job whose tensor every rank receives
  int process_set = kGlobalProcessSet;  // with a set, root must be one of its members
};

struct AlltoallOptions {
  std::string name = {};                  // "" = "alltoall.noname.<n>"
  std::vector<std::int64_t> splits = {};  // rows of dim 0 sent to each rank; empty = equal parts
  int process_set = kGlobalProcessSet;
  OutputAllocator output = {};  // device memory on the device path only (types.h)
};

struct ReducescatterOptions {
  std::string name = {};             // "" = "reducescatter.noname.<n>"
  ReduceOp op = ReduceOp::kAverage;  // kSum or kAverage
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
  int process_set = kGlobalProcessSet;
  OutputAllocator output = {};  // device memory on the device path only (types.h)
};

// Every `process_set` field: the id() of a ProcessSet this rank is a member of (only its
// members submit operations on it; the others get kolo::Error at once). A broadcast's root
// is a rank of the job, as in Horovod (a root that is not a member is a kolo::Error at
// once); alltoall's splits and the order of allgather's rows follow the set's ranks
// (ProcessSet::rank()).
struct BarrierOptions {
  int process_set = kGlobalProcessSet;
};

// --- lifecycle and topology -------------------------------------------------------------

// Starts the runtime. Rank and size come from the launcher: kolorun (KOLO_RANK, ...),
// mpirun (OMPI_COMM_WORLD_*), or Slurm's srun (SLURM_PROCID, ...); a program started
// alone is rank 0 of 1. Calling init() twice is a no-op. Throws kolo::Error on failure.
void init();
// The same, with `settings` (KOLO_* names, as in the environment: {"KOLO_PEER_TIMEOUT_SECONDS",
// "120"}) taking precedence over the environment's values; unknown KOLO_* names are errors
// as in the environment. A no-op when kolo is already initialized (the settings are then
// not applied).
void init(const std::map<std::string, std::string>& settings);
// Stops the runtime: operations still pending on any rank fail with kShutdown. Safe to
// call twice; kolo::init() may be called again afterwards.
void shutdown();
bool is_initialized();
// Whether CUDA tensors run on the device path: as they are, through NCCL on kolo's own
// CUDA stream, ordered with the caller's streams by events (TensorView::ready_event,
// Handle::device_event). True once initialized in a kolo built with KOLO_DEVICE_PATH
// (docs/gpu.md); otherwise the adapters stage CUDA tensors through host memory.
bool has_device_path();

int rank();        // this process's rank in [0, size)
int size();        // number of ranks
int local_rank();  // rank among the processes on this host
int local_size();  // processes on this host
int cross_rank();  // rank among the processes with this local_rank (the host's index)
int cross_size();  // number of hosts with a process of this local_rank

// --- collectives -----------------------------------------------------------------------
// *_async functions return at once; the others block and throw kolo::Error on failure.
// Errors detected on this rank alone (duplicate name in flight, not initialized) are
// thrown by the *_async call itself.

// output = reduce(input over ranks). `output` may be `input` (in place); both must have
// the same dtype and element count.
Handle allreduce_async(const TensorView& input, const TensorView& output,
                       const AllreduceOptions& options = {});
void allreduce(const TensorView& input, const TensorView& output,
               const AllreduceOptions& options = {});
void allreduce(const TensorView& tensor, const AllreduceOptions& options = {});  // in place

// Several allreduces negotiated and completed as one operation under one name.
Handle grouped_allreduce_async(const std::vector<TensorView>& inputs,
                               const std::vector<TensorView>& outputs,
                               const AllreduceOptions& options = {});
void grouped_allreduce(const std::vector<TensorView>& inputs,
                       const std::vector<TensorView>& outputs,
                       const AllreduceOptions& options = {});

// Concatenates every rank's tensor along dim 0 in rank order. Dim 0 may differ between
// ranks; the other dimensions must agree. The result is Handle::output().
Handle allgather_async(const TensorView& input, const AllgatherOptions& options = {});
Tensor allgather(const TensorView& input, const AllgatherOptions& options = {});

// Overwrites `tensor` on every rank with the root's `tensor`.
Handle broadcast_async(const TensorView& tensor, const BroadcastOptions& options = {});
void broadcast(const TensorView& tensor, const BroadcastOptions& options = {});

// Sends splits[i] rows of dim 0 to rank i (consecutive rows, in rank order) and receives
// the rows every rank sent here, in rank order. Without splits, dim 0 must divide evenly.
struct AlltoallResult {
  Tensor output;
  std::vector<std::int64_t> received_splits;  // rows received from each rank
};
Handle alltoall_async(const TensorView& input, const AlltoallOptions& options = {});
AlltoallResult alltoall(const TensorView& input, const AlltoallOptions& options = {});

// Reduces across ranks, then rank r keeps its block of dim 0. With N rows and S ranks,
// the first N % S ranks get N / S + 1 rows and the others N / S (as Horovod does).
Handle reducescatter_async(const TensorView& input, const ReducescatterOptions& options = {});
Tensor reducescatter(const TensorView& input, const ReducescatterOptions& options = {});

// Returns once every rank of the process set has reached the barrier (ranks that have
// joined take part implicitly). One barrier per rank and process set may be in flight at
// a time.
Handle barrier_async(const BarrierOptions& options = {});
void barrier(const BarrierOptions& options = {});

// A rank that has run out of data calls join(): until every rank has joined, it takes
// part in the others' allreduces with the op's identity: zeros for sums (averages still
// divide by the full size), +inf / the type's largest value for min, -inf / the lowest for
// max, 1 for product.
// Allgather, broadcast, alltoall and reducescatter fail while a rank has joined.
// Returns the last rank to join, the same on every rank. join() is for the global set only
// (as in Horovod): operations on other process sets need every member of that set.
Handle join_async();
int join();

// --- process sets (see the top of this file) ---------------------------------------------

// The set of all ranks (id kGlobalProcessSet).
ProcessSet global_process_set();
// The set with this id (what ProcessSet::id() and the options' `process_set` hold), as
// this rank sees it. Throws kolo::Error (kInvalidArgument) for a removed or unknown id.
ProcessSet process_set(int id);
// Registers a process set of `ranks` (ranks of the job, in any order: they are sorted, as
// Horovod does; no repeats). Collective: every rank of the job calls it, non-members too,
// with the same ranks, and all ranks make their add/remove calls in the same order. Blocks
// until every rank has made the call; ids count up from 1 and are never reused. Throws
// kolo::Error on every rank when the ranks differ between ranks (kMismatch, naming each
// rank's list), are empty, out of range or repeated, when a set of these ranks already
// exists (the global set's ranks included: use global_process_set()), or while a rank has
// joined (kInvalidArgument). A refused call leaves no trace: the next one runs as if it had
// not been made.
ProcessSet add_process_set(std::vector<int> ranks);
// Removes a set: collective like add_process_set. Operations still pending on it fail
// (naming the set), later ones are refused. Throws kolo::Error (kInvalidArgument) for
// the global set and for a set that does not exist (any more).
void remove_process_set(const ProcessSet& set);

// --- timeline ---------------------------------------------------------------------------

// Rank 0 starts writing a Chrome-trace JSON timeline to `path` (Perfetto and
// chrome://tracing open it): per tensor the phases negotiate, wait_for_ranks, pack,
// communicate and unpack; with mark_cycles, every negotiation cycle too. Same as setting
// KOLO_TIMELINE=path (and KOLO_TIMELINE_MARK_CYCLES=1) before init(). Replaces a running
// timeline. Other ranks ignore the call, so every rank may make it. Throws kolo::Error
// (kInvalidArgument) when rank 0 cannot open the file.
void start_timeline(const std::string& path, bool mark_cycles = false);
// Finishes the file (closes its JSON array). No-op when no timeline is running.
void stop_timeline();

// --- elastic jobs (kolorun --min-np/--max-np/--host-discovery-script) ----------------------
// The runtime's side of elastic training; most programs use kolo/elastic.h (elastic::run,
// State) instead of these. docs/elastic.md has the whole design.
namespace elastic {
// Whether this process is a worker of an elastic job (KOLO_ELASTIC=1, set by kolorun).
bool enabled();
// The generation the runtime belongs to: 0 for the job's first membership, one more each
// time the workers re-formed; -1 when kolo is not initialized or the job is not elastic.
int generation();
// Collective over the current generation (every rank calls it at the same point): whether
// kolorun has a newer membership (workers added, or removed from the host list). Rank 0
// asks the job's store and every rank returns its answer. false when not elastic.
bool hosts_updated();
// Ends this generation (kolo::shutdown() without waiting for the departed) and joins the
// next: waits, at most KOLO_ELASTIC_TIMEOUT_SECONDS, for kolorun's next membership, meets
// its workers and starts the runtime again; rank() and size() may change. Returns false,
// with kolo shut down, when this worker is not part of the job any more (kolorun removed
// it, or the job is ending): the program should then exit without using kolo. Throws
// kolo::WorkersChanged when the new generation failed to form too (call reset() again),
// and kolo::Error when no membership came in time or the job is not elastic.
bool reset();
}  // namespace elastic

}  // namespace kolo
