// Runtime: one instance of kolo's runtime (all of its state; no globals).
//
// The caller's threads submit requests (built by request_builder.h; ops.h is the typed,
// throwing front) and get Handles; one background thread owns the communicator and runs
// negotiation cycles: the pacer (pacer.h) says when, the controllers (controller.h, one
// per process set this rank is in) negotiate, the executor (executor.h) runs the
// responses and the handles complete.
//
// Caller-run cycles: when the communicator may be called from any thread and cycles run
// on demand (a CycleBell), a thread blocked in Handle::wait() runs the cycles that are
// due itself, one at a time with the background thread (CycleGate), until its handle
// finishes or nothing is due for a few microseconds; then it sleeps as before. A
// submit-then-wait costs no hand-off between threads (two wake-ups each way). The
// public free functions in include/kolo/kolo.h use one default Runtime; tests create
// several, one per rank, over the inproc transport.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "core/entry.h"
#include "core/message.h"
#include "core/pacer.h"
#include "core/timeline.h"
#include "device/device.h"
#include "kolo/kolo.h"
#include "startup/config.h"
#include "transport/communicator.h"

namespace kolo::core {

class FusionBuffer;
class DevicePath;

// The error of an elastic generation that lost a worker (kWorkersChanged): `why` is the
// peer failure or the departure the transport reported.
Status workers_changed(const std::string& why);

class Runtime {
 public:
  // Creates the communicator; called once on the background thread, which is the only
  // thread that uses it (so MPI may be initialised with MPI_THREAD_FUNNELED).
  using CommunicatorFactory = std::function<Status(std::unique_ptr<transport::Communicator>*)>;

  Runtime(Config config, CommunicatorFactory factory);
  ~Runtime();  // shuts down
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Called on the background thread when the runtime stops because other ranks left
  // (their programs ended without kolo::shutdown(): `left`, job ranks, never this one),
  // before the pending operations fail. kolo::init() uses it to tell kolorun which ranks
  // this rank's end follows from (its choice of the job's cause). Set before start().
  using EndObserver = std::function<void(const std::vector<int>& left)>;
  void set_end_observer(EndObserver observer) { end_observer_ = std::move(observer); }

  // Makes this rank's device (device/device.h) the first time a response of device
  // tensors runs (device_path.h): with one, CUDA tensors passed as they are (not staged on
  // the host) run through the device's collectives (NCCL); without, they are refused as
  // before. Called on the background thread. Set before start().
  // `index`: the CUDA ordinal of the first device tensor, or -1 when this rank has none
  // (it joined): the factory's own choice.
  using DeviceFactory = std::function<Status(int index, std::unique_ptr<device::Device>*)>;
  void set_device_factory(DeviceFactory factory) { device_factory_ = std::move(factory); }
  bool has_device_path() const { return static_cast<bool>(device_factory_); }
  // Starts the background thread and waits (bounded) until the transport is up.
  Status start();
  // Asks every rank to stop; pending operations fail with kShutdown, naming the ranks
  // that stopped. `at_exit`: the program is ending without kolo::shutdown() (the other
  // ranks' errors say so). Idempotent.
  void shutdown(bool at_exit = false);

  const transport::Topology& topology() const { return topology_; }
  const Config& config() const { return config_; }

  // Submits a request built by request_builder.h with its tensors; on success *handle
  // is the operation's. Refused here: a name already in flight on this rank (or one of
  // the reserved names 'join' and 'barrier' for another op), and any request once the
  // runtime stopped (kNotInitialized) or failed (its error). Any thread.
  // `allocate_output`: allgather's, alltoall's and reducescatter's, for device memory.
  Status submit(Request request, std::vector<TensorView> inputs, std::vector<TensorView> outputs,
                Handle* handle, OutputAllocator allocate_output = {});
  // "<op>.noname.<n>" ("<op>.set<k>.noname.<n>" on process set k): the name of an
  // operation submitted without one (the same on every rank that submits the same
  // sequence of unnamed operations on that set).
  std::string default_name(OpType op, int process_set = kGlobalProcessSet);

  // Process sets (kolo.h's add_process_set / remove_process_set). Each change is
  // negotiated on the global set like an operation, so every rank agrees on it or gets
  // its error; the background thread applies it when the response executes (every rank
  // at the same point of the global order): a communicator over the members
  // (Communicator::subset) and a controller of its own. These block until then. Any thread.
  Status add_process_set(std::vector<int> ranks, ProcessSet* out);
  Status remove_process_set(int id);
  // The set `id` as this rank knows it; kInvalidArgument when there is none (any more).
  Status process_set(int id, ProcessSet* out) const;

  // Negotiation statistics of the global process set (for tests).
  std::uint64_t fast_cycles() const;
  std::uint64_t slow_cycles() const;
  // Responses executed as members of a fused allreduce (for tests and logs).
  std::uint64_t fused_responses() const;
  // Negotiation cycles run so far, and whether they run on demand (the transport has a
  // CycleBell and KOLO_CYCLE_ON_DEMAND=1) rather than on a timer. For tests and logs.
  std::uint64_t cycles() const;
  bool cycles_on_demand() const;
  // Of those, the cycles that a thread blocked in Handle::wait() ran itself.
  std::uint64_t caller_cycles() const { return caller_cycles_.load(); }

  // Rank 0 writes a Chrome-trace timeline to `path` (see timeline.h); other ranks ignore
  // these calls. start_timeline fails (kInvalidArgument) when the file cannot be opened.
  Status start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();

  // The fusion threshold and cycle time in use (autotune changes them at run time, on
  // every rank between the same two cycles), and each change with the number of the
  // cycle after which it took effect. For tests and logs.
  using Tunables = core::Tunables;
  Tunables tunables() const;
  std::vector<std::pair<std::uint64_t, Tunables>> tunables_history() const;

  // For tests: while held, the background thread keeps cycling but takes no new
  // requests, so everything submitted meanwhile enters negotiation in one cycle.
  void hold_requests(bool hold);

 private:
  struct Loop;    // the background thread's state (runtime_internal.h)
  struct Helper;  // the handles' CycleHelper: caller-run cycles (runtime_internal.h)
  void loop();
  // Creates the communicator and publishes the topology and the bell of on-demand cycling
  // (*bell, null without it); false if that failed.
  bool start_transport(transport::CycleBell** bell);
  // One negotiation cycle: waits for it (pacer), then cycle_step. Returns whether the loop
  // goes on.
  bool run_cycle(Loop& loop);
  // A started cycle: negotiates every process set, executes the responses, feeds
  // autotune. Under the CycleGate. Returns whether the loop goes on.
  bool cycle_step(Loop& loop, Pacer::Work work, bool timeline);
  // Caller-run cycles for a waiter of `state`, with the gate held (`gate` is its lock).
  void help(const detail::HandleState& state, std::unique_lock<std::mutex>& gate);
  // After a cycle: statistics, and the tunables every rank switches to at this cycle.
  void finish_cycle(Loop& loop, const Tunables* next);
  // Fails what is pending with the loop's error (or the shutdown message) and releases
  // the communicator.
  void stop(Loop& loop);
  // Runs one group of plan_fusion() and completes its handles. Returns a peer failure
  // (which stops the runtime); every other error only fails the group's handles.
  // `device`: the set's device path, for a group of device tensors (else null).
  Status execute_group(transport::Communicator& comm, const std::vector<Response>& responses,
                       const std::vector<std::size_t>& group, FusionBuffer& buffer,
                       DevicePath* device, transport::Deadline deadline,
                       std::chrono::steady_clock::time_point responded);
  // The device path of `set` (made with the device at its first use, for the GPU of the
  // group led by `first`), or the error that kept the device from being made.
  Status device_path(Loop& loop, struct ProcessSetState& set, const Response& first,
                     DevicePath** out);
  // The CUDA ordinal of the submitted operation `name`'s first tensor; -1 without one.
  int device_index_of(const std::string& name) KOLO_EXCLUDES(mu_);
  // Polls the device paths' running groups (DevicePath::poll); false with loop.fatal set
  // when one failed. *busy: some still run.
  bool poll_device_paths(Loop& loop, bool* busy);
  // In an elastic job a peer failure ends the generation: kWorkersChanged (else `s`).
  Status elastic_view(Status s) const;
  // Whether an operation's error stops the runtime (a peer failure, or the elastic form).
  static bool ends_runtime(const Status& s);
  // Timeline: stamps the end of their first cycle on the entries named.
  void mark_first_cycle(const std::vector<std::string>& names,
                        std::chrono::steady_clock::time_point end) KOLO_EXCLUDES(mu_);
  void fail_all(const Status& status) KOLO_EXCLUDES(mu_);
  // Completes the handles of one group of `responses` with `status`.
  void fail_group(const std::vector<Response>& responses, const std::vector<std::size_t>& group,
                  const Status& status) KOLO_EXCLUDES(mu_);
  std::shared_ptr<Entry> take(const std::string& name) KOLO_EXCLUDES(mu_);
  // submit() that returns the handle's state (for the calls that wait on it here).
  Status submit_entry(Request request, std::vector<TensorView> inputs,
                      std::vector<TensorView> outputs, std::shared_ptr<detail::HandleState>* state,
                      OutputAllocator allocate_output = {}) KOLO_EXCLUDES(mu_);
  // Submits a process-set change and waits for it; *id: the set it made (add).
  Status change_process_sets(Request request, int* id);
  // Background thread: applies a negotiated add/remove_process_set response and
  // completes its handle. Returns a peer failure (which stops the runtime); every other
  // error only fails the call, on every rank alike.
  Status apply_set_change(Loop& loop, const Response& response);
  Status add_set(Loop& loop, const Response& response, int* id);
  Status remove_set(Loop& loop, const Response& response);

  const Config config_;
  CommunicatorFactory factory_;
  DeviceFactory device_factory_;
  EndObserver end_observer_;
  // Written by the background thread before start() returns; constant afterwards.
  transport::Topology topology_;
  // Used by the thread that runs a cycle (under the CycleGate once the loop runs).
  std::unique_ptr<transport::Communicator> comm_;
  std::thread thread_;
  Timeline timeline_;               // thread-safe; records come from the background thread
  Inbox inbox_;                     // thread-safe: new requests, stop and hold
  std::shared_ptr<Helper> helper_;  // its gate orders the cycles; handles hold it weakly
  Loop* loop_ = nullptr;            // (the gate) while the loop runs and callers may help
  std::atomic<std::uint64_t> caller_cycles_{0};

  mutable std::mutex mu_;
  std::condition_variable started_cv_;
  bool started_ KOLO_GUARDED_BY(mu_) = false;
  Status start_status_ KOLO_GUARDED_BY(mu_);
  bool running_ KOLO_GUARDED_BY(mu_) = false;
  Status fatal_ KOLO_GUARDED_BY(mu_);
  // Submitted and not yet completed, by name.
  std::unordered_map<std::string, std::shared_ptr<Entry>> table_ KOLO_GUARDED_BY(mu_);
  std::map<std::pair<int, OpType>, std::uint64_t> unnamed_counts_ KOLO_GUARDED_BY(mu_);
  // The process sets this rank knows (members or not), by id; written by the background
  // thread when a change executes. The global set is there from start() on.
  struct SetInfo {
    std::vector<int> ranks;  // the job's ranks, ascending
    int rank = -1;           // this rank's index in `ranks`; -1: not a member
  };
  std::map<int, SetInfo> sets_ KOLO_GUARDED_BY(mu_);
  int next_set_id_ KOLO_GUARDED_BY(mu_) = 1;  // ids below it that sets_ lacks were removed
  std::uint64_t set_changes_ KOLO_GUARDED_BY(mu_) = 0;  // names the changes alike everywhere
  std::uint64_t fast_cycles_ KOLO_GUARDED_BY(mu_) = 0;
  std::uint64_t slow_cycles_ KOLO_GUARDED_BY(mu_) = 0;
  std::uint64_t fused_responses_ KOLO_GUARDED_BY(mu_) = 0;
  std::uint64_t cycles_ KOLO_GUARDED_BY(mu_) = 0;
  // Written by the background thread under mu_; read there without it.
  Tunables tunables_;
  std::vector<std::pair<std::uint64_t, Tunables>> tunables_history_ KOLO_GUARDED_BY(mu_);
};

}  // namespace kolo::core
