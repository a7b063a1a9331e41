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

namespace kolo::core {

namespace {

// The error of operations still pending when the job stopped: who stopped it, and how.
std::string shutdown_message(const std::vector<int>& shutdown_ranks,
                             const std::vector<int>& exited_ranks, int self) {
  std::string who;
  if (!exited_ranks.empty()) {
    who = ranks_string(exited_ranks) +
          " left: the program ended (returned from main or called exit()) without "
          "kolo::shutdown()";
  }
  if (!shutdown_ranks.empty()) {
    if (!who.empty()) who += "; ";
    who += ranks_string(shutdown_ranks) + " called kolo::shutdown()";
  }
  if (who.empty()) who = "some rank called kolo::shutdown()";
  const bool only_self = exited_ranks.empty() && shutdown_ranks == std::vector<int>{self};
  return "kolo was shut down while this operation was pending: " + who +
         (only_self ? std::string(". ") : std::string(", while this rank waited for it. ")) +
         "Every rank must run the same collectives before it stops (a rank that runs out of "
         "data early calls kolo::join()).";
}

// This thread runs a negotiation cycle now (a wait() nested in one must not help again).
thread_local bool t_in_cycle = false;

// How long a helping waiter looks for a due cycle before it sleeps: about one round trip
// of a peer's cycle, so that lockstep ranks keep running their own.
constexpr std::chrono::microseconds kHelpSpin(30);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// More ranks on this host than CPUs this process may run on: a spinning waiter would take
// the CPU of the rank it waits for, so it yields instead.
bool oversubscribed(int local_size) {
  cpu_set_t cpus;
  const int usable = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
  return usable > 0 && local_size > usable;
}

}  // namespace

// The handles' CycleHelper. Owns the gate, so a waiter that holds the helper may lock it
// after the Runtime is gone (it then finds `runtime` null).
struct Runtime::Helper final : detail::CycleHelper {
  CycleGate gate;
  Runtime* runtime = nullptr;  // (gate.mu) null once the Runtime is destroyed

  void help(const detail::HandleState& state) override {
    if (t_in_cycle) return;
    std::unique_lock<std::mutex> lock(gate.mu, std::defer_lock);
    // The background thread holds the gate: it looks at the pacer (a moment), or runs a
    // cycle, maybe this handle's. Look again for a while before sleeping on the handle: a
    // sleep costs a wake-up on the way back (20-30 us on a busy 2-core VM, where lockstep
    // ranks met the background thread's looks in one of ten iterations or more). Only
    // while cycles are short (helper_look): a long one outlasts the look, and the yields
    // took the other ranks' cores.
    const auto until = std::chrono::steady_clock::now() + helper_look(gate.last_cycle());
    while (!lock.try_lock()) {
      if (state.finished.load(std::memory_order_acquire) ||
          std::chrono::steady_clock::now() >= until) {
        return;
      }
      sched_yield();  // that thread may be waiting for this core
    }
    if (runtime == nullptr) return;
    runtime->help(state, lock);
  }
};

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
                       std::vector<TensorView> outputs, Handle* handle) {
  std::shared_ptr<detail::HandleState> state;
  KOLO_RETURN_IF_ERROR(
      submit_entry(std::move(request), std::move(inputs), std::move(outputs), &state));
  *handle = Handle(std::move(state));
  return Status::OK();
}

Status Runtime::submit_entry(Request request, std::vector<TensorView> inputs,
                             std::vector<TensorView> outputs,
                             std::shared_ptr<detail::HandleState>* state) {
  auto entry = std::make_shared<Entry>();
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

Status Runtime::change_process_sets(Request request, int* id) {
  {
    // Named by the number of changes that succeeded: a refused change leaves no trace,
    // also on a rank that took no part in it (one that had joined gets the refusal's
    // response but made no call, so a count of calls would drift apart between ranks).
    std::lock_guard<std::mutex> lock(mu_);
    request.name = "kolo.process_set." + std::to_string(set_changes_);
  }
  std::shared_ptr<detail::HandleState> state;
  KOLO_RETURN_IF_ERROR(submit_entry(std::move(request), {}, {}, &state));
  // Bounded: the runtime fails every pending operation on a peer failure, a stall
  // shutdown or shutdown().
  const Handle handle(state);
  while (!handle.wait_for(std::chrono::seconds(1))) {
  }
  if (!handle.ok()) return Status(handle.error_code(), handle.error_message());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++set_changes_;
  }
  if (id) *id = state->process_set_id;
  return Status::OK();
}

Status Runtime::add_process_set(std::vector<int> ranks, ProcessSet* out) {
  int id = -1;
  KOLO_RETURN_IF_ERROR(change_process_sets(add_process_set_request(std::move(ranks), ""), &id));
  return process_set(id, out);
}

Status Runtime::remove_process_set(int id) {
  if (id == kGlobalProcessSet) {  // also refused by negotiation; said here without a round
    return InvalidArgument("remove_process_set: the global process set (id 0) cannot be removed");
  }
  return change_process_sets(remove_process_set_request(id, ""), nullptr);
}

Status Runtime::process_set(int id, ProcessSet* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = sets_.find(id);
  if (it == sets_.end()) {
    return InvalidArgument("process set " + std::to_string(id) +
                           (id > 0 && id < next_set_id_ ? " was removed" : " does not exist"));
  }
  *out = ProcessSet(id, it->second.ranks, it->second.rank);
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

Status Runtime::execute_group(transport::Communicator& comm, const std::vector<Response>& responses,
                              const FusionGroup& group, FusionBuffer& buffer,
                              transport::Deadline deadline,
                              std::chrono::steady_clock::time_point responded) {
  std::vector<std::shared_ptr<Entry>> entries;
  std::vector<FusedItem> items;
  for (std::size_t index : group) {
    const Response& r = responses[index];
    entries.push_back(take(r.name));
    Entry* entry = entries.back().get();
    if (r.is_error()) {
      if (entry) entry->handle->complete(r.error_code, r.error);
      entries.pop_back();
      continue;
    }
    if (entry) entry->handle->mark_started();
    items.push_back({&r, entry});
  }
  if (items.empty()) return Status::OK();
  Status s;
  std::vector<Status> item_status(items.size());
  ExecTimes times;
  const Response& only = *items[0].response;
  // A lone allreduce goes through execute_fused too when the transport reduces pieces:
  // scaling then happens in the passes that move the data.
  const bool lone = items.size() == 1 && only.wire_dtype == only.dtype &&
                    !(only.op == OpType::kAllreduce && comm.reduces_pieces());
  if (lone) {
    s = execute_response(comm, *items[0].response, items[0].entry, deadline, &times);
  } else {
    s = execute_fused(comm, items, buffer, deadline, &item_status, &times);
    std::lock_guard<std::mutex> lock(mu_);
    if (items.size() > 1) fused_responses_ += items.size();
  }
  s = elastic_view(s);
  const bool timeline = timeline_.active();
  for (std::size_t k = 0; k < items.size(); ++k) {
    Entry* entry = items[k].entry;
    if (!entry) continue;
    if (timeline) {
      const Response& r = *items[k].response;
      Timeline::Phases p;
      p.enqueued = entry->handle->times.enqueued;
      p.first_cycle_end = entry->first_cycle_end == Timeline::Clock::time_point{}
                              ? responded
                              : entry->first_cycle_end;
      p.response = responded;
      p.pack_start = times.pack_start;
      p.comm_start = times.comm_start;
      p.comm_end = times.comm_end;
      p.unpack_end = times.unpack_end;
      timeline_.record(r.name, op_name(r.op), allreduce_bytes(r), p);
    }
    // (s is in its elastic form already; an item's own error too.)
    const Status mine = s.ok() ? elastic_view(item_status[k]) : s;
    entry->handle->complete(mine.code(), mine.message());
  }
  return ends_runtime(s) ? s : Status::OK();
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

// A process set this rank is a member of: its communicator and its controller.
struct ProcessSetState {
  // `global`: the job's communicator, used by the global set; other sets own theirs.
  ProcessSetState(const Config& config, transport::Communicator* global,
                  std::unique_ptr<transport::Communicator> own, int id, std::vector<int> members)
      : owned(std::move(own)), controller(config, owned ? owned.get() : global, id, members) {}
  std::unique_ptr<transport::Communicator> owned;  // null for the global set
  Controller controller;                           // destroyed before `owned`
};

// The background thread's state between cycles.
struct Runtime::Loop {
  Loop(Inbox& inbox, transport::CycleBell* bell) : pacer(inbox, bell) {}
  // One controller per process set this rank is in, by id, each negotiating among its own
  // ranks over its own communicator. Every cycle runs them in id order on every rank (the
  // global set first), so no two ranks wait for each other in different sets.
  std::map<int, ProcessSetState> sets;
  FusionBuffer fusion_buffer;
  std::unique_ptr<Autotuner> autotuner;  // rank 0 with KOLO_AUTOTUNE only
  Pacer pacer;
  bool oversubscribed = false;  // a helping waiter yields its CPU instead of spinning
  std::chrono::steady_clock::duration peer_timeout{};
  bool must_cycle = false;  // a controller has news for the next cycle (bell only)
  // A set other than the global one was busy in the last cycle: the next global cycle
  // says so to every rank, so that timer-paced ranks outside the set do not back off.
  bool sets_busy = false;
  Status fatal;
  bool shutdown = false;
  std::vector<int> shutdown_ranks, exited_ranks;  // who stopped, for the pending ops' error
};

bool Runtime::start_transport(transport::CycleBell** bell) {
  // A member that left while the generation formed: kWorkersChanged.
  Status status = elastic_view(factory_(&comm_));
  // The timeline starts before start() returns, so it sees the first request.
  if (status.ok() && !config_.timeline_path.empty() && comm_->rank() == 0) {
    Status t = timeline_.start(config_.timeline_path, config_.timeline_mark_cycles);
    if (!t.ok()) {
      KOLO_LOG(kError, "timeline") << t.message();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status.ok()) {
      topology_ = comm_->topology();
      SetInfo& global = sets_[kGlobalProcessSet];
      for (int r = 0; r < topology_.size; ++r) global.ranks.push_back(r);
      global.rank = topology_.rank;
      *bell = config_.cycle_on_demand ? comm_->cycle_bell() : nullptr;
      inbox_.set_bell(*bell);
      tunables_.hierarchical = comm_->hierarchical();
    }
    start_status_ = status;
    running_ = status.ok();
    started_ = true;
  }
  started_cv_.notify_all();
  return status.ok();
}

void Runtime::loop() {
  transport::CycleBell* bell = nullptr;  // set before start() returns; fixed until the end
  if (!start_transport(&bell)) return;
  log::set_thread_rank(topology_.rank);
  Loop loop(inbox_, bell);
  loop.sets.try_emplace(kGlobalProcessSet, config_, comm_.get(), nullptr, kGlobalProcessSet,
                        std::vector<int>{});
  if (config_.autotune && topology_.rank == 0) {
    AutotuneOptions options;
    options.warmup_samples = config_.autotune_warmup_samples;
    options.cycles_per_sample = config_.autotune_cycles_per_sample;
    options.log_path = config_.autotune_log;
    options.tune_hierarchical = comm_->can_switch_hierarchical();
    loop.autotuner = std::make_unique<Autotuner>(tunables_, options);
  }
  loop.peer_timeout = seconds_duration(config_.peer_timeout_seconds);
  {
    // Held from here on but while the pacer sleeps: callers run cycles only then.
    std::unique_lock<std::mutex> gate(helper_->gate.mu);
    // Without callers that may help, the pacer needs no gate (nor light sleeps).
    if (bell && comm_->calls_from_any_thread()) {
      loop.pacer.set_gate(&helper_->gate);
      loop.pacer.set_waiting_probe([this] {
        std::lock_guard<std::mutex> lock(mu_);
        return !table_.empty();
      });
      loop.oversubscribed = oversubscribed(topology_.local_size);
      loop_ = &loop;
    }
    while (run_cycle(loop)) {
    }
    loop_ = nullptr;
  }
  stop(loop);
}

void Runtime::help(const detail::HandleState& state, std::unique_lock<std::mutex>& gate_lock) {
  CycleGate& gate = helper_->gate;
  if (loop_ == nullptr || gate.ended) return;
  Loop& loop = *loop_;
  gate.helper.store(true, std::memory_order_seq_cst);
  loop.pacer.bell()->set_helper_awake(true);  // rings need wake no one: this thread looks
  t_in_cycle = true;
  log::set_thread_rank(topology_.rank);
  auto idle_until = std::chrono::steady_clock::now() + kHelpSpin;
  while (!state.finished.load(std::memory_order_acquire)) {
    const bool timeline = timeline_.active();
    Pacer::Work work;
    if (loop.pacer.try_start(tunables_.cycle_time_ms, loop.must_cycle, timeline, &work)) {
      if (!cycle_step(loop, std::move(work), timeline)) {
        caller_cycles_.fetch_add(1, std::memory_order_relaxed);
        gate.ended = true;  // the background thread stops the runtime
        break;
      }
      caller_cycles_.fetch_add(1, std::memory_order_relaxed);
      idle_until = std::chrono::steady_clock::now() + kHelpSpin;
      continue;
    }
    if (std::chrono::steady_clock::now() >= idle_until) break;
    if (loop.oversubscribed) {
      sched_yield();
    } else {
      cpu_relax();
    }
  }
  const std::uint64_t cycles = loop.pacer.cycle_number();
  // A handle left unfinished waits for other ranks: the background thread takes over its
  // heartbeat (and notices a dead peer) from now on.
  const bool force =
      gate.ended || loop.must_cycle || !state.finished.load(std::memory_order_acquire);
  t_in_cycle = false;
  loop.pacer.bell()->set_helper_awake(false);
  gate.helper.store(false, std::memory_order_seq_cst);
  gate_lock.unlock();
  // What came in meanwhile is the background thread's again (it may sleep: ring it).
  inbox_.wake_if(force, cycles);
}

bool Runtime::run_cycle(Loop& loop) {
  bool waiting;  // operations of this rank wait for other ranks: keep a heartbeat
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting = !table_.empty();
  }
  const bool timeline = timeline_.active();
  Pacer::Work work = loop.pacer.next(tunables_.cycle_time_ms, waiting, loop.must_cycle, timeline);
  if (helper_->gate.ended) return false;  // a caller's cycle ended the loop
  return cycle_step(loop, std::move(work), timeline);
}

bool Runtime::cycle_step(Loop& loop, Pacer::Work work, bool timeline) {
  const auto cycle_start = loop.pacer.cycle_start();
  bool idle = true;
  double busy_bytes = 0;
  std::optional<Tunables> next_tunables;
  Controller::Leave leave = Controller::Leave::kNo;
  if (work.stop) {
    leave = inbox_.stop_at_exit() ? Controller::Leave::kExit : Controller::Leave::kShutdown;
  }
  // Sets added while the global set's responses execute are in the map before the loop
  // reaches their id (ids grow), so they run their first cycle in this one on every member.
  for (auto& [id, set] : loop.sets) {
    Controller& controller = set.controller;
    auto mine = work.requests.find(id);
    std::vector<Request> requests;
    if (mine != work.requests.end()) {
      requests = std::move(mine->second);
      work.requests.erase(mine);
    }
    // Only the global set carries shutdown: every rank learns of it there, in one cycle.
    // It also tells every rank when this one has work in another set (see Loop::sets_busy).
    const bool global = id == kGlobalProcessSet;
    bool busy_elsewhere = false;
    if (global) {
      busy_elsewhere = loop.sets_busy;
      for (const auto& [set_id, reqs] : work.requests) busy_elsewhere |= !reqs.empty();
      loop.sets_busy = false;
    }
    Controller::Cycle cycle = controller.run(
        std::move(requests), global ? leave : Controller::Leave::kNo, busy_elsewhere);
    if (!global) loop.sets_busy |= !cycle.idle || !cycle.responses.empty();
    const auto responded = std::chrono::steady_clock::now();
    if (timeline) {
      mark_first_cycle(work.taken, responded);
      if (!cycle.responses.empty()) timeline_.mark_cycle(cycle_start, cycle.responses.size());
    }
    idle = idle && cycle.idle && cycle.responses.empty();
    loop.fatal = cycle.fatal;
    if (cycle.shutdown && !loop.shutdown) {
      loop.shutdown = true;
      loop.shutdown_ranks = cycle.shutdown_ranks;
      loop.exited_ranks = cycle.exited_ranks;
    }
    for (const FusionGroup& group :
         plan_fusion(cycle.responses, tunables_.fusion_threshold_bytes)) {
      if (!loop.fatal.ok()) break;
      const Response& first = cycle.responses[group.front()];
      if (first.op == OpType::kAddProcessSet || first.op == OpType::kRemoveProcessSet) {
        loop.fatal = apply_set_change(loop, first);  // never fused: one per group
        continue;
      }
      loop.fatal =
          execute_group(controller.communicator(), cycle.responses, group, loop.fusion_buffer,
                        transport::Clock::now() + loop.peer_timeout, responded);
    }
    for (const Response& r : cycle.responses) {
      if (!r.is_error()) busy_bytes += static_cast<double>(allreduce_bytes(r));
    }
    if (cycle.has_tunables) next_tunables = cycle.tunables;
    if (!loop.fatal.ok() || loop.shutdown) break;
  }
  // Requests for a set that is gone (removed after they were submitted, before this
  // cycle took them): their handles fail here rather than wait forever. (Those of sets
  // the loop did not reach, after a shutdown or failure, fail in stop().)
  for (auto& [id, requests] : work.requests) {
    if (loop.sets.count(id)) continue;
    for (const Request& r : requests) {
      if (auto entry = take(r.name)) {
        entry->handle->complete(ErrorCode::kInvalidArgument,
                                std::string(op_name(r.op)) + " '" + r.name + "': process set " +
                                    std::to_string(id) +
                                    " was removed (kolo::remove_process_set) before it ran");
      }
    }
  }
  if (loop.autotuner && busy_bytes > 0 && tunables_ == loop.autotuner->current()) {
    const auto since = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double>(t.time_since_epoch()).count();
    };
    auto change = loop.autotuner->observe(busy_bytes, since(cycle_start),
                                          since(std::chrono::steady_clock::now()));
    if (change) loop.sets.at(kGlobalProcessSet).controller.propose(*change);
  }
  loop.must_cycle = false;
  for (const auto& [id, set] : loop.sets) {
    loop.must_cycle = loop.must_cycle || set.controller.wants_cycle();
  }
  loop.pacer.cycle_done(idle);
  finish_cycle(loop, next_tunables ? &*next_tunables : nullptr);
  return !loop.shutdown && loop.fatal.ok();
}

void Runtime::finish_cycle(Loop& loop, const Tunables* next) {
  std::uint64_t fast = 0, slow = 0;
  for (const auto& [id, set] : loop.sets) {
    fast += set.controller.fast_cycles();
    slow += set.controller.slow_cycles();
  }
  std::lock_guard<std::mutex> lock(mu_);
  fast_cycles_ = fast;
  slow_cycles_ = slow;
  cycles_ = loop.pacer.cycle_number();
  if (next == nullptr || *next == tunables_) return;
  // Every rank got the same list, so every rank switches here, between the same cycles.
  tunables_ = *next;
  tunables_history_.emplace_back(cycles_, tunables_);
  if (comm_->can_switch_hierarchical()) comm_->set_hierarchical(tunables_.hierarchical);
  KOLO_LOG(kInfo, "autotune") << "fusion threshold " << tunables_.fusion_threshold_bytes
                              << " bytes, cycle time " << tunables_.cycle_time_ms << " ms"
                              << (comm_->can_switch_hierarchical()
                                      ? (tunables_.hierarchical ? ", hierarchical allreduce"
                                                                : ", flat MPI allreduce")
                                      : "");
}

Status Runtime::apply_set_change(Loop& loop, const Response& r) {
  std::shared_ptr<Entry> entry = take(r.name);
  Status s;
  int id = -1;
  if (r.is_error()) {
    s = Status(r.error_code, r.error);
  } else if (r.op == OpType::kAddProcessSet) {
    s = add_set(loop, r, &id);
  } else {
    s = remove_set(loop, r);
  }
  s = elastic_view(s);
  if (entry) {
    entry->handle->process_set_id = id;
    entry->handle->complete(s.code(), s.message());
  }
  return ends_runtime(s) ? s : Status::OK();
}

Status Runtime::add_set(Loop& loop, const Response& r, int* id) {
  const std::vector<int> ranks(r.splits.begin(), r.splits.end());
  const std::string what = std::string(op_name(r.op)) + " '" + r.name + "'";
  {
    // Every rank knows the same sets at this point of the order: the same verdict.
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [other, info] : sets_) {
      if (info.ranks != ranks) continue;
      if (other == kGlobalProcessSet) {
        return InvalidArgument(what + ": " + ranks_string(ranks) +
                               " are every rank of the job: a duplicate of the global process "
                               "set (id 0); use kolo::global_process_set()");
      }
      return InvalidArgument(what + ": process set " + std::to_string(other) + " already has " +
                             ranks_string(ranks) + "; use it, or remove it first");
    }
  }
  std::unique_ptr<transport::Communicator> sub;
  Status made = comm_->subset(ranks, &sub);
  if (made.code() == ErrorCode::kPeerFailure) return made;
  if (!made.ok()) {
    KOLO_LOG(kWarning, "process_set") << what << ": " << made.message();
  }
  // One verdict on every rank, also when only some could make their communicator.
  std::vector<std::uint64_t> ok = {made.ok() ? 1u : 0u};
  KOLO_RETURN_IF_ERROR(comm_->control_and(ok, transport::Clock::now() + loop.peer_timeout));
  if (ok[0] == 0) {
    return Status(
        made.ok() ? ErrorCode::kUnsupported : made.code(),
        what + ": the " + comm_->name() + " transport could not make a communicator over " +
            ranks_string(ranks) + ": " +
            (made.ok() ? "it failed on another rank (see that rank's log)" : made.message()));
  }
  int mine = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == topology_.rank) mine = static_cast<int>(i);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    *id = next_set_id_++;
    sets_[*id] = SetInfo{ranks, mine};
  }
  if (sub) loop.sets.try_emplace(*id, config_, comm_.get(), std::move(sub), *id, ranks);
  KOLO_LOG(kInfo, "process_set") << "process set " << *id << ": " << ranks_string(ranks)
                                 << (mine >= 0
                                         ? " (this rank is its rank " + std::to_string(mine) + ")"
                                         : " (this rank is not a member)");
  return Status::OK();
}

Status Runtime::remove_set(Loop& loop, const Response& r) {
  const int id = r.root;
  std::vector<std::shared_ptr<Entry>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sets_.count(id)) {
      return InvalidArgument(
          std::string(op_name(r.op)) + " '" + r.name + "': process set " + std::to_string(id) +
          (id > 0 && id < next_set_id_ ? " was already removed" : " does not exist"));
    }
    sets_.erase(id);
    for (auto it = table_.begin(); it != table_.end();) {
      if (it->second->request.process_set == id) {
        pending.push_back(std::move(it->second));
        it = table_.erase(it);
      } else {
        ++it;
      }
    }
  }
  loop.sets.erase(id);  // its controller, then its communicator
  for (auto& entry : pending) {
    entry->handle->complete(ErrorCode::kInvalidArgument,
                            std::string(op_name(entry->request.op)) + " '" + entry->request.name +
                                "': process set " + std::to_string(id) +
                                " was removed (kolo::remove_process_set) while this operation "
                                "was pending on rank " +
                                std::to_string(topology_.rank));
  }
  KOLO_LOG(kInfo, "process_set") << "process set " << id << " removed";
  return Status::OK();
}

void Runtime::stop(Loop& loop) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    KOLO_LOG(kDebug, "runtime") << comm_->name() << ": " << cycles_ << " cycles (" << fast_cycles_
                                << " fast, " << slow_cycles_ << " slow; " << caller_cycles_.load()
                                << " run by waiting callers)";
  }
  if (end_observer_) {
    std::vector<int> left;
    for (int r : loop.exited_ranks) {
      if (r != topology_.rank) left.push_back(r);
    }
    if (!left.empty()) end_observer_(left);
  }
  // In an elastic job a worker that is gone (failed, or its program ended without
  // kolo::shutdown()) ends this generation, not the job: kolo::elastic::run goes on.
  Status end = elastic_view(loop.fatal);
  if (config_.elastic && end.ok() && !loop.exited_ranks.empty()) {
    end = workers_changed(shutdown_message(loop.shutdown_ranks, loop.exited_ranks, topology_.rank));
  }
  if (end.code() == ErrorCode::kWorkersChanged) {
    KOLO_LOG(kWarning, "elastic") << "this generation of the elastic job ended: " << end.message();
    fail_all(end);
  } else if (!end.ok()) {
    KOLO_LOG(kError, "runtime") << end.message();
    fail_all(end);
  } else {
    fail_all(Status(ErrorCode::kShutdown,
                    shutdown_message(loop.shutdown_ranks, loop.exited_ranks, topology_.rank)));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
  timeline_.stop();
  inbox_.set_bell(nullptr);  // the communicator owns it
  loop.sets.clear();         // the controllers use the communicator
  comm_.reset();             // on this thread, the only one that uses it
}

}  // namespace kolo::core
