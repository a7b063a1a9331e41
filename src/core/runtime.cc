// The Runtime: construction and start, submission of requests, handles, the timeline and
// tunables. The background loop is runtime_loop.cc, process sets runtime_sets.cc; their
// shared types runtime_internal.h.
#include "core/runtime.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "common/convert.h"
#include "common/deadline.h"
#include "common/format.h"
#include "common/logging.h"
#include "core/autotune.h"
#include "core/controller.h"
#include "core/executor.h"
#include "core/fusion.h"
#include "core/request_builder.h"
#include "core/runtime_internal.h"

namespace kolo::core {

Status workers_changed(const std::string& why) {
  return Status(ErrorCode::kWorkersChanged,
                "a worker left this generation of the elastic job (" + why +
                    "); kolo::elastic::run restores the last commit and goes on with the "
                    "workers that are left");
}

Runtime::Runtime(Config config, CommunicatorFactory factory)
    : config_(std::move(config)),
      factory_(std::move(factory)),
      helper_(std::make_shared<Helper>()) {
  tunables_.fusion_threshold_bytes = config_.fusion_threshold_bytes;
  tunables_.cycle_time_ms = config_.cycle_time_ms;
  helper_->runtime = this;
}

Runtime::~Runtime() {
  shutdown();
  std::lock_guard<std::mutex> lock(helper_->gate.mu);  // after any helping waiter
  helper_->runtime = nullptr;
}

Status Runtime::start() {
  thread_ = std::thread([this] { loop(); });
  std::unique_lock<std::mutex> lock(mu_);
  // MPI start-up waits for every process of the job; bound it like any other wait.
  const double limit_s = std::max(60.0, config_.peer_timeout_seconds);
  if (!started_cv_.wait_for(lock, seconds_duration(limit_s), [this] { return started_; })) {
    return PeerFailure("the " + config_.transport + " transport did not start within " +
                       std::to_string(static_cast<int>(limit_s)) +
                       " s; are all workers running (kolorun/mpirun)?");
  }
  return start_status_;
}

void Runtime::shutdown(bool at_exit) {
  inbox_.request_stop(at_exit);
  // exit() on the runtime's own thread (from a callback) cannot wait for itself.
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::string Runtime::default_name(OpType op, int process_set) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string set =
      process_set == kGlobalProcessSet ? "" : ".set" + std::to_string(process_set);
  return std::string(op_name(op)) + set + ".noname." +
         std::to_string(unnamed_counts_[{process_set, op}]++);
}

Status Runtime::submit(Request request, std::vector<TensorView> inputs,
                       std::vector<TensorView> outputs, Handle* handle,
                       OutputAllocator allocate_output) {
  std::shared_ptr<detail::HandleState> state;
  KOLO_RETURN_IF_ERROR(submit_entry(std::move(request), std::move(inputs), std::move(outputs),
                                    &state, std::move(allocate_output)));
  *handle = Handle(std::move(state));
  return Status::OK();
}

Status Runtime::submit_entry(Request request, std::vector<TensorView> inputs,
                             std::vector<TensorView> outputs,
                             std::shared_ptr<detail::HandleState>* state,
                             OutputAllocator allocate_output) {
  auto entry = std::make_shared<Entry>();
  entry->allocate_output = std::move(allocate_output);
  entry->handle = std::make_shared<detail::HandleState>();
  entry->handle->name = request.name;
  entry->handle->helper = helper_;
  entry->handle->times.enqueued = Handle::Clock::now();
  // The messages are built only when a check fails (submit is on every step's path).
  const auto what = [&request] {
    return std::string(op_name(request.op)) + " '" + request.name + "'";
  };
  const auto not_running = [&what] {
    return Status(ErrorCode::kNotInitialized,
                  what() +
                      ": kolo is not running (call kolo::init() first; after "
                      "kolo::shutdown() no operation can be submitted)");
  };
  std::lock_guard<std::mutex> lock(mu_);
  if (!fatal_.ok()) return fatal_;
  if (!running_ || inbox_.stop_requested()) return not_running();
  const bool internal = request.op == OpType::kJoin || request.op == OpType::kBarrier;
  if (!internal && (request.name == "join" || request.name == "barrier")) {
    // The fixed names of join() and barrier(): a tensor by that name would be confused
    // with them on ranks that joined or wait in a barrier.
    return InvalidArgument(what() +
                           ": the names 'join' and 'barrier' are reserved for kolo::join() and "
                           "kolo::barrier(); choose another name");
  }
  if (table_.count(request.name)) {
    return Status(ErrorCode::kDuplicateName,
                  "a tensor named '" + request.name + "' is already in flight on rank " +
                      std::to_string(topology_.rank) +
                      "; wait for its handle before reusing the name, or choose another name");
  }
  // A process set's negotiation numbers its members 0..n-1.
  request.rank = topology_.rank;
  if (request.process_set != kGlobalProcessSet) {
    const int id = request.process_set;
    const auto set = sets_.find(id);
    if (set == sets_.end()) {
      return InvalidArgument(
          what() + ": process set " + std::to_string(id) +
          (id < next_set_id_ ? " was removed (kolo::remove_process_set)"
                             : " does not exist (pass an id that kolo::add_process_set returned)"));
    }
    if (set->second.rank < 0) {
      return InvalidArgument(what() + ": rank " + std::to_string(topology_.rank) +
                             " is not a member of process set " + std::to_string(id) + " (" +
                             ranks_string(set->second.ranks) +
                             "); only its members may submit operations on it");
    }
    request.rank = set->second.rank;
    if (request.op == OpType::kBroadcast) {
      // Roots are ranks of the job (Horovod's rule); negotiation inside the set numbers
      // its members 0..n-1.
      const std::vector<int>& members = set->second.ranks;
      const auto root = std::find(members.begin(), members.end(), request.root);
      if (root == members.end()) {
        return InvalidArgument(what() + ": root rank " + std::to_string(request.root) +
                               " is not a member of process set " + std::to_string(id) + " (" +
                               ranks_string(members) +
                               "); the root is a rank of the job, one of the set's ranks");
      }
      request.root = static_cast<std::int32_t>(root - members.begin());
    }
  }
  entry->request = request;
  entry->inputs = std::move(inputs);
  entry->outputs = std::move(outputs);
  const auto it = table_.emplace(request.name, entry).first;
  if (!inbox_.push(std::move(request))) {  // stopped meanwhile
    table_.erase(it);
    return not_running();
  }
  *state = entry->handle;
  return Status::OK();
}

std::uint64_t Runtime::fast_cycles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fast_cycles_;
}

std::uint64_t Runtime::slow_cycles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slow_cycles_;
}

std::uint64_t Runtime::fused_responses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fused_responses_;
}

std::uint64_t Runtime::cycles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cycles_;
}

bool Runtime::cycles_on_demand() const { return inbox_.has_bell(); }

void Runtime::hold_requests(bool hold) { inbox_.hold(hold); }

int Runtime::device_index_of(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = table_.find(name);
  if (it == table_.end() || it->second->inputs.empty()) return -1;
  return it->second->inputs.front().device_index;
}

std::shared_ptr<Entry> Runtime::take(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = table_.find(name);
  if (it == table_.end()) return nullptr;
  auto entry = std::move(it->second);
  table_.erase(it);
  return entry;
}

void Runtime::fail_all(const Status& status) {
  std::unordered_map<std::string, std::shared_ptr<Entry>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fatal_.ok()) fatal_ = status;
    pending.swap(table_);
    inbox_.clear();
  }
  for (auto& [name, entry] : pending) entry->handle->complete(status.code(), status.message());
}

Status Runtime::start_timeline(const std::string& path, bool mark_cycles) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (topology_.rank != 0) return Status::OK();
  }
  return timeline_.start(path, mark_cycles);
}

void Runtime::stop_timeline() { timeline_.stop(); }

void Runtime::mark_first_cycle(const std::vector<std::string>& names,
                               std::chrono::steady_clock::time_point end) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& name : names) {
    auto it = table_.find(name);
    if (it != table_.end() &&
        it->second->first_cycle_end == std::chrono::steady_clock::time_point{}) {
      it->second->first_cycle_end = end;
    }
  }
}

Status Runtime::elastic_view(Status s) const {
  if (config_.elastic && s.code() == ErrorCode::kPeerFailure) return workers_changed(s.message());
  return s;
}

bool Runtime::ends_runtime(const Status& s) {
  return s.code() == ErrorCode::kPeerFailure || s.code() == ErrorCode::kWorkersChanged;
}

Runtime::Tunables Runtime::tunables() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tunables_;
}

std::vector<std::pair<std::uint64_t, Tunables>> Runtime::tunables_history() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tunables_history_;
}

}  // namespace kolo::core
