// Runtime: one instance of kolo's runtime (all of its state; no globals).
//
// The caller's threads enqueue named operations and get Handles; one background thread
// owns the communicator and runs negotiation cycles (controller.h), executes the
// responses (executor.h) and completes the handles. The public free functions in
// include/kolo/kolo.h use one default Runtime; tests create several, one per rank, over
// the inproc transport.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "core/message.h"
#include "core/timeline.h"
#include "kolo/kolo.h"
#include "transport/communicator.h"

namespace kolo::core {

// One submitted operation waiting to run.
class FusionBuffer;
struct Response;

struct Entry {
  Request request;
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  std::shared_ptr<detail::HandleState> handle;
  // Timeline only (background thread): end of the first cycle that carried the request.
  std::chrono::steady_clock::time_point first_cycle_end{};
};

class Runtime {
 public:
  // Creates the communicator; called once on the background thread, which is the only
  // thread that uses it (so MPI may be initialised with MPI_THREAD_FUNNELED).
  using CommunicatorFactory = std::function<Status(std::unique_ptr<transport::Communicator>*)>;

  Runtime(Config config, CommunicatorFactory factory);
  ~Runtime();  // shuts down
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Starts the background thread and waits (bounded) until the transport is up.
  Status start();
  // Asks every rank to stop; pending operations fail with kShutdown, naming the ranks
  // that stopped. `at_exit`: the program is ending without kolo::shutdown() (the other
  // ranks' errors say so). Idempotent.
  void shutdown(bool at_exit = false);

  const transport::Topology& topology() const { return topology_; }
  const Config& config() const { return config_; }

  // The operations of include/kolo/kolo.h. Errors found on this rank alone (duplicate
  // name, shut down, bad arguments) throw kolo::Error here.
  Handle allreduce(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                   const AllreduceOptions& options, bool grouped);
  Handle allgather(const TensorView& input, const AllgatherOptions& options);
  Handle broadcast(const TensorView& tensor, const BroadcastOptions& options);
  Handle alltoall(const TensorView& input, const AlltoallOptions& options);
  Handle reducescatter(const TensorView& input, const ReducescatterOptions& options);
  Handle barrier(const BarrierOptions& options);
  Handle join();

  // Negotiation statistics of the global process set (for tests).
  std::uint64_t fast_cycles() const;
  std::uint64_t slow_cycles() const;
  // Responses executed as members of a fused allreduce (for tests and logs).
  std::uint64_t fused_responses() const;
  // Negotiation cycles run so far, and whether they run on demand (the transport has a
  // CycleBell and KOLO_CYCLE_ON_DEMAND=1) rather than on a timer. For tests and logs.
  std::uint64_t cycles() const;
  bool cycles_on_demand() const;

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
  Handle enqueue(Request request, std::vector<TensorView> inputs, std::vector<TensorView> outputs);
  std::string default_name(OpType op);
  void loop();
  // Waits for new requests (at most `idle_wait`, and while they arrive before
  // `not_before`, until then), moves them into `requests` by process set and their names
  // into `taken` when `timeline`. Returns whether shutdown was requested.
  bool wait_for_work(std::chrono::steady_clock::duration idle_wait,
                     std::chrono::steady_clock::time_point not_before, bool timeline,
                     std::map<int, std::vector<Request>>* requests,
                     std::vector<std::string>* taken);
  // wait_for_work with a CycleBell: sleeps until this rank has new requests (or stop), or
  // another rank asked for cycle `done` + 1, or `heartbeat` passes (or `must_cycle`), and
  // then asks every rank for cycle `done` + 1 if nobody did yet.
  bool wait_for_cycle(transport::CycleBell& bell, std::uint64_t done, bool must_cycle,
                      std::chrono::steady_clock::time_point heartbeat,
                      std::chrono::steady_clock::time_point not_before, bool timeline,
                      std::map<int, std::vector<Request>>* requests,
                      std::vector<std::string>* taken);
  // Moves the new requests (unless held) into `requests` and their names into `taken`.
  void take_new_requests(bool timeline, std::map<int, std::vector<Request>>* requests,
                         std::vector<std::string>* taken);  // mu_ held
  // Runs one group of plan_fusion() and completes its handles. Returns a peer failure
  // (which stops the runtime); every other error only fails the group's handles.
  Status execute_group(transport::Communicator& comm, const std::vector<Response>& responses,
                       const std::vector<std::size_t>& group, FusionBuffer& buffer,
                       transport::Deadline deadline,
                       std::chrono::steady_clock::time_point responded);
  // Timeline: stamps the end of their first cycle on the entries named.
  void mark_first_cycle(const std::vector<std::string>& names,
                        std::chrono::steady_clock::time_point end);
  void fail_all(const Status& status);
  std::shared_ptr<Entry> take(const std::string& name);

  const Config config_;
  CommunicatorFactory factory_;
  transport::Topology topology_;  // written by the background thread before start() returns
  std::unique_ptr<transport::Communicator> comm_;  // background thread only
  std::thread thread_;
  Timeline timeline_;  // thread-safe; records come from the background thread

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // new requests or shutdown
  std::condition_variable started_cv_;
  bool started_ = false;                                           // guarded by mu_
  Status start_status_;                                            // guarded by mu_
  bool stop_requested_ = false;                                    // guarded by mu_
  bool stop_at_exit_ = false;                                      // guarded by mu_
  bool running_ = false;                                           // guarded by mu_
  Status fatal_;                                                   // guarded by mu_
  std::unordered_map<std::string, std::shared_ptr<Entry>> table_;  // guarded by mu_
  std::vector<Request> new_requests_;                              // guarded by mu_
  std::map<OpType, std::uint64_t> unnamed_counts_;                 // guarded by mu_
  std::uint64_t fast_cycles_ = 0;                                  // guarded by mu_
  std::uint64_t slow_cycles_ = 0;                                  // guarded by mu_
  std::uint64_t fused_responses_ = 0;                              // guarded by mu_
  bool hold_requests_ = false;                                     // guarded by mu_
  std::uint64_t cycles_ = 0;                                       // guarded by mu_
  // The communicator's bell while on-demand cycling runs (null otherwise or once the
  // communicator is gone); enqueue() and shutdown() ring it under mu_.
  transport::CycleBell* bell_ = nullptr;  // guarded by mu_
  // Written by the background thread under mu_; read there without it.
  Tunables tunables_;
  std::vector<std::pair<std::uint64_t, Tunables>> tunables_history_;  // guarded by mu_
};

}  // namespace kolo::core
