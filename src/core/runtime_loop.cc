// The runtime's background thread: its loop, the negotiation cycle as named steps
// (run_cycle, cycle_step, finish_cycle), the execution of a cycle's responses
// (execute_group), caller-run cycles (help) and the stop. Not for: submission and handles
// (runtime.cc) or process-set changes (runtime_sets.cc).
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

void Runtime::Helper::help(const detail::HandleState& state) {
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

void Runtime::fail_group(const std::vector<Response>& responses, const FusionGroup& group,
                         const Status& status) {
  for (std::size_t index : group) {
    if (auto entry = take(responses[index].name)) {
      entry->handle->complete(status.code(), status.message());
    }
  }
}

Status Runtime::device_path(Loop& loop, ProcessSetState& set, const Response& first,
                            DevicePath** out) {
  if (!set.device_path) {
    if (!loop.device && loop.device_status.ok()) {
      loop.device_index = device_index_of(first.name);
      loop.device_status = device_factory_(loop.device_index, &loop.device);
      if (loop.device_status.ok() && !loop.device) {
        loop.device_status = Internal("the device factory made no device");
      }
    }
    if (!loop.device_status.ok()) return loop.device_status;
    // KOLO_HIERARCHICAL=1: the device's collectives inside each host, the CPU transport
    // across (otherwise only where host-mates share a GPU).
    set.device_path = std::make_unique<DevicePath>(
        *loop.device, loop.device_index,
        device::ConnectOptions{.hierarchical = config_.hierarchical == "1"});
  }
  *out = set.device_path.get();
  return Status::OK();
}

bool Runtime::poll_device_paths(Loop& loop, bool* busy) {
  *busy = false;
  for (auto& [id, set] : loop.sets) {
    if (!set.device_path) continue;
    const Status s = set.device_path->poll();
    if (!s.ok()) {
      loop.fatal = elastic_view(s);
      return false;
    }
    *busy = *busy || set.device_path->busy();
  }
  return true;
}

Status Runtime::execute_group(transport::Communicator& comm, const std::vector<Response>& responses,
                              const FusionGroup& group, FusionBuffer& buffer, DevicePath* device,
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
  std::shared_ptr<device::Event> done;  // the device path's group event
  if (device != nullptr) {
    s = device->execute(comm, items, deadline, &item_status, &times, &done);
  } else if (lone) {
    s = execute_response(comm, *items[0].response, items[0].entry, deadline, &times);
  } else {
    s = execute_fused(comm, items, buffer, deadline, &item_status, &times);
  }
  if (items.size() > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    fused_responses_ += items.size();
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
    if (done && mine.ok()) {
      entry->handle->device_event = device->native_event(*done);
      entry->handle->device_event_owner = done;
    }
    entry->handle->complete(mine.code(), mine.message());
  }
  return ends_runtime(s) ? s : Status::OK();
}

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
      const transport::AlgorithmSwitch* algorithms = comm_->algorithm_switch();
      tunables_.hierarchical = algorithms != nullptr && algorithms->hierarchical();
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
    options.tune_hierarchical = comm_->algorithm_switch() != nullptr;
    loop.autotuner = std::make_unique<Autotuner>(tunables_, options);
  }
  loop.peer_timeout = seconds_duration(config_.peer_timeout_seconds);
  {
    // Held from here on but while the pacer sleeps: callers run cycles only then.
    std::unique_lock<std::mutex> gate(helper_->gate.mu);
    // Without callers that may help, the pacer needs no gate (nor light sleeps).
    if (bell && comm_->calls_from_any_thread()) {
      loop.pacer.set_gate(&helper_->gate);
      // (Called with the gate held, as every use of the loop.)
      loop.pacer.set_waiting_probe([this, &loop] {
        if (loop.device_busy) return true;  // device work to poll
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
  waiting = waiting || loop.device_busy;  // device work to poll
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
  // Device work enqueued in earlier cycles: release what finished, fail on what broke.
  loop.device_busy = false;
  if (!poll_device_paths(loop, &loop.device_busy)) return false;
  idle = !loop.device_busy;
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
      DevicePath* device = nullptr;
      if (device_factory_ && runs_on_device(first)) {
        const Status made = device_path(loop, set, first, &device);
        if (!made.ok()) {
          // No device (a rank without a GPU, a failed start): the group fails, on this
          // rank, naming why; the others' collective then fails at its deadline.
          fail_group(cycle.responses, group, made);
          continue;
        }
      }
      loop.fatal =
          execute_group(controller.communicator(), cycle.responses, group, loop.fusion_buffer,
                        device, transport::Clock::now() + loop.peer_timeout, responded);
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
    // Groups enqueued in this cycle: the next cycles poll them.
    loop.device_busy = loop.device_busy || (set.device_path && set.device_path->busy());
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
  transport::AlgorithmSwitch* algorithms = comm_->algorithm_switch();
  if (algorithms != nullptr) algorithms->set_hierarchical(tunables_.hierarchical);
  KOLO_LOG(kInfo, "autotune") << "fusion threshold " << tunables_.fusion_threshold_bytes
                              << " bytes, cycle time " << tunables_.cycle_time_ms << " ms"
                              << (algorithms != nullptr
                                      ? (tunables_.hierarchical ? ", hierarchical allreduce"
                                                                : ", flat allreduce")
                                      : "");
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
