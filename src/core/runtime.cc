#include "core/runtime.h"

#include <chrono>

#include "common/convert.h"
#include "common/logging.h"
#include "core/autotune.h"
#include "core/controller.h"
#include "core/executor.h"
#include "core/fusion.h"

namespace kolo::core {

namespace {

[[noreturn]] void throw_error(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

// The error of operations still pending when the job stopped: who stopped it, and how.
std::string shutdown_message(const std::vector<int>& shutdown_ranks,
                             const std::vector<int>& exited_ranks, int self) {
  std::string who;
  if (!exited_ranks.empty()) {
    who = "rank(s) " + rank_list_string(exited_ranks) +
          " left: the program ended (returned from main or called exit()) without "
          "kolo::shutdown()";
  }
  if (!shutdown_ranks.empty()) {
    if (!who.empty()) who += "; ";
    who += "rank(s) " + rank_list_string(shutdown_ranks) + " called kolo::shutdown()";
  }
  if (who.empty()) who = "some rank called kolo::shutdown()";
  const bool only_self = exited_ranks.empty() && shutdown_ranks == std::vector<int>{self};
  return "kolo was shut down while this operation was pending: " + who +
         (only_self ? std::string(". ") : std::string(", while this rank waited for it. ")) +
         "Every rank must run the same collectives before it stops (a rank that runs out of "
         "data early calls kolo::join()).";
}

void check_view(const TensorView& v, const std::string& what) {
  // Every dimension, not only the product: {-2, -3} has 6 "elements".
  std::int64_t elements = 1;
  for (std::int64_t d : v.shape) {
    if (d < 0) {
      throw_error(ErrorCode::kInvalidArgument,
                  what + " has a negative dimension " + shape_string(v.shape));
    }
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(elements, d, &elements) ||
        __builtin_mul_overflow(elements, static_cast<std::int64_t>(dtype_size(v.dtype)), &bytes)) {
      throw_error(ErrorCode::kInvalidArgument, what + " has shape " + shape_string(v.shape) +
                                                   ": its size in bytes does not fit in 64 bits");
    }
  }
  if (v.data == nullptr && v.numel() > 0) {
    throw_error(ErrorCode::kInvalidArgument,
                what + " has " + std::to_string(v.numel()) + " elements but a null data pointer");
  }
}

std::chrono::duration<double> seconds(double s) { return std::chrono::duration<double>(s); }

// Waits between cycles without local work (see Runtime::loop).
constexpr std::chrono::milliseconds kMinIdleWait(1);
constexpr std::chrono::milliseconds kMaxIdleWait(8);
// On-demand cycling: while this rank has operations waiting for other ranks it still asks
// for a cycle this often, so that time-based checks (stall warnings, stall shutdown,
// renegotiation of long-waiting cache hits) keep running.
constexpr std::chrono::milliseconds kHeartbeat(100);

void check_process_set(int id, const std::string& what) {
  if (id != kGlobalProcessSet) {
    throw_error(ErrorCode::kInvalidArgument,
                what + ": process set " + std::to_string(id) +
                    " does not exist (only the global set 0 is available)");
  }
}

}  // namespace

Runtime::Runtime(Config config, CommunicatorFactory factory)
    : config_(std::move(config)), factory_(std::move(factory)) {
  tunables_.fusion_threshold_bytes = config_.fusion_threshold_bytes;
  tunables_.cycle_time_ms = config_.cycle_time_ms;
}

Runtime::~Runtime() { shutdown(); }

Status Runtime::start() {
  thread_ = std::thread([this] { loop(); });
  std::unique_lock<std::mutex> lock(mu_);
  // MPI start-up waits for every process of the job; bound it like any other wait.
  const auto limit = seconds(std::max(60.0, config_.peer_timeout_seconds));
  if (!started_cv_.wait_for(lock, limit, [this] { return started_; })) {
    return PeerFailure("the " + config_.transport + " transport did not start within " +
                       std::to_string(static_cast<int>(limit.count())) +
                       " s; are all workers running (kolorun/mpirun)?");
  }
  return start_status_;
}

void Runtime::shutdown(bool at_exit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_requested_) stop_at_exit_ = at_exit;
    stop_requested_ = true;
    if (bell_) bell_->wake_local();
  }
  work_cv_.notify_all();
  // exit() on the runtime's own thread (from a callback) cannot wait for itself.
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::string Runtime::default_name(OpType op) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::string(op_name(op)) + ".noname." + std::to_string(unnamed_counts_[op]++);
}

Handle Runtime::enqueue(Request request, std::vector<TensorView> inputs,
                        std::vector<TensorView> outputs) {
  auto entry = std::make_shared<Entry>();
  entry->handle = std::make_shared<detail::HandleState>();
  entry->handle->name = request.name;
  entry->handle->times.enqueued = Handle::Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_.ok()) throw_error(fatal_.code(), fatal_.message());
    if (!running_ || stop_requested_) {
      throw_error(ErrorCode::kNotInitialized,
                  std::string(op_name(request.op)) + " '" + request.name +
                      "': kolo is not running (call kolo::init() first; after kolo::shutdown() "
                      "no operation can be submitted)");
    }
    const bool internal = request.op == OpType::kJoin || request.op == OpType::kBarrier;
    if (!internal && (request.name == "join" || request.name == "barrier")) {
      // The fixed names of join() and barrier(): a tensor by that name would be confused
      // with them on ranks that joined or wait in a barrier.
      throw_error(ErrorCode::kInvalidArgument,
                  std::string(op_name(request.op)) + " '" + request.name +
                      "': the names 'join' and 'barrier' are reserved for kolo::join() and "
                      "kolo::barrier(); choose another name");
    }
    if (table_.count(request.name)) {
      throw_error(ErrorCode::kDuplicateName,
                  "a tensor named '" + request.name + "' is already in flight on rank " +
                      std::to_string(topology_.rank) +
                      "; wait for its handle before reusing the name, or choose another name");
    }
    request.rank = topology_.rank;
    entry->request = request;
    entry->inputs = std::move(inputs);
    entry->outputs = std::move(outputs);
    table_.emplace(request.name, entry);
    new_requests_.push_back(std::move(request));
    if (bell_) bell_->wake_local();
  }
  work_cv_.notify_one();
  return Handle(entry->handle);
}

Handle Runtime::allreduce(const std::vector<TensorView>& inputs,
                          const std::vector<TensorView>& outputs, const AllreduceOptions& o,
                          bool grouped) {
  Request r;
  r.op = OpType::kAllreduce;
  r.name = o.name.empty() ? default_name(r.op) : o.name;
  const std::string what =
      std::string(grouped ? "grouped allreduce '" : "allreduce '") + r.name + "'";
  check_process_set(o.process_set, what);
  r.process_set = o.process_set;
  if (inputs.empty() || inputs.size() != outputs.size()) {
    throw_error(ErrorCode::kInvalidArgument,
                what + ": got " + std::to_string(inputs.size()) + " inputs and " +
                    std::to_string(outputs.size()) +
                    " outputs; pass one output per input (at least one)");
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorView& in = inputs[i];
    const TensorView& out = outputs[i];
    check_view(in, what + " input " + std::to_string(i));
    check_view(out, what + " output " + std::to_string(i));
    if (in.dtype != inputs[0].dtype || in.device != inputs[0].device) {
      // Horovod fuses mixed dtypes in one group; here a group is one request with one
      // dtype, so a mixed group is split by the caller.
      throw_error(ErrorCode::kInvalidArgument,
                  what + ": tensor " + std::to_string(i) + " is " + dtype_name(in.dtype) + " on " +
                      device_kind_name(in.device) + " but tensor 0 is " +
                      dtype_name(inputs[0].dtype) + " on " + device_kind_name(inputs[0].device) +
                      "; every tensor of a group must have one dtype and device: make one group "
                      "per dtype (they still fuse with each other's dtype-mates)");
    }
    if (out.dtype != in.dtype || out.numel() != in.numel() || out.device != in.device) {
      throw_error(ErrorCode::kInvalidArgument,
                  what + ": output " + std::string(dtype_name(out.dtype)) +
                      shape_string(out.shape) + " does not match input " + dtype_name(in.dtype) +
                      shape_string(in.shape) +
                      "; they need the same dtype, device and number of elements");
    }
    r.shapes.push_back(in.shape);
  }
  r.dtype = inputs[0].dtype;
  r.device = inputs[0].device;
  r.reduce_op = o.op;
  r.prescale = o.prescale_factor;
  r.postscale = o.postscale_factor;
  r.wire_dtype = wire_dtype(r.dtype, o.compression);
  return enqueue(std::move(r), inputs, outputs);
}

namespace {
Request single(OpType op, const std::string& name, const TensorView& t, int process_set) {
  check_process_set(process_set, std::string(op_name(op)) + " '" + name + "'");
  check_view(t, std::string(op_name(op)) + " '" + name + "' tensor");
  Request r;
  r.process_set = process_set;
  r.op = op;
  r.name = name;
  r.dtype = t.dtype;
  r.wire_dtype = t.dtype;
  r.device = t.device;
  r.shapes = {t.shape};
  return r;
}
}  // namespace

Handle Runtime::allgather(const TensorView& input, const AllgatherOptions& o) {
  const auto name = o.name.empty() ? default_name(OpType::kAllgather) : o.name;
  return enqueue(single(OpType::kAllgather, name, input, o.process_set), {input}, {});
}

Handle Runtime::broadcast(const TensorView& tensor, const BroadcastOptions& o) {
  const auto name = o.name.empty() ? default_name(OpType::kBroadcast) : o.name;
  Request r = single(OpType::kBroadcast, name, tensor, o.process_set);
  r.root = o.root;
  return enqueue(std::move(r), {tensor}, {tensor});
}

Handle Runtime::alltoall(const TensorView& input, const AlltoallOptions& o) {
  const auto name = o.name.empty() ? default_name(OpType::kAlltoall) : o.name;
  Request r = single(OpType::kAlltoall, name, input, o.process_set);
  r.splits = o.splits;
  return enqueue(std::move(r), {input}, {});
}

Handle Runtime::reducescatter(const TensorView& input, const ReducescatterOptions& o) {
  const auto name = o.name.empty() ? default_name(OpType::kReducescatter) : o.name;
  Request r = single(OpType::kReducescatter, name, input, o.process_set);
  r.reduce_op = o.op;
  r.prescale = o.prescale_factor;
  r.postscale = o.postscale_factor;
  return enqueue(std::move(r), {input}, {});
}

Handle Runtime::barrier(const BarrierOptions& o) {
  TensorView none;
  none.shape = {0};
  // One fixed name: ranks that have joined skip barriers, so per-call names would drift
  // apart between ranks. At most one barrier per rank is in flight.
  Request r = single(OpType::kBarrier, "barrier", none, o.process_set);
  r.shapes.clear();
  return enqueue(std::move(r), {}, {});
}

Handle Runtime::join() {
  Request r;
  r.op = OpType::kJoin;
  r.name = "join";
  return enqueue(std::move(r), {}, {});
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

bool Runtime::cycles_on_demand() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bell_ != nullptr;
}

void Runtime::hold_requests(bool hold) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    hold_requests_ = hold;
    if (bell_) bell_->wake_local();
  }
  work_cv_.notify_all();
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
    new_requests_.clear();
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
    const Status& mine = s.ok() ? item_status[k] : s;
    entry->handle->complete(mine.code(), mine.message());
  }
  return s.code() == ErrorCode::kPeerFailure ? s : Status::OK();
}

bool Runtime::wait_for_work(std::chrono::steady_clock::duration idle_wait,
                            std::chrono::steady_clock::time_point not_before, bool timeline,
                            std::map<int, std::vector<Request>>* requests,
                            std::vector<std::string>* taken) {
  std::unique_lock<std::mutex> lock(mu_);
  work_cv_.wait_for(lock, idle_wait, [this] {
    return (!new_requests_.empty() && !hold_requests_) || stop_requested_;
  });
  // KOLO_CYCLE_TIME_MS: work that arrives soon after the previous cycle began waits for
  // more to come, so it is negotiated (and fused) together.
  if (!new_requests_.empty() && std::chrono::steady_clock::now() < not_before) {
    work_cv_.wait_until(lock, not_before, [this] { return stop_requested_; });
  }
  take_new_requests(timeline, requests, taken);
  return stop_requested_;
}

bool Runtime::wait_for_cycle(transport::CycleBell& bell, std::uint64_t done, bool must_cycle,
                             std::chrono::steady_clock::time_point heartbeat,
                             std::chrono::steady_clock::time_point not_before, bool timeline,
                             std::map<int, std::vector<Request>>* requests,
                             std::vector<std::string>* taken) {
  // Bounds each sleep, so that a lost wake-up (there should be none) costs at most this.
  constexpr std::chrono::seconds kLongestSleep(1);
  bool ask = must_cycle;
  for (;;) {
    // The ticket is read before looking, so news that comes after the look ends the wait.
    const std::uint32_t ticket = bell.ticket();
    if (bell.requested() > done) break;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if ((!new_requests_.empty() && !hold_requests_) || stop_requested_) ask = true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= heartbeat) ask = true;
    if (ask) break;
    bell.wait(ticket, std::min(heartbeat, now + kLongestSleep));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (ask) {
    // KOLO_CYCLE_TIME_MS, as in wait_for_work. Another rank's request is not delayed: it
    // is already waiting in the cycle.
    if (bell.requested() <= done && std::chrono::steady_clock::now() < not_before) {
      work_cv_.wait_until(lock, not_before, [this] { return stop_requested_; });
    }
    bell.request(done + 1);
  }
  take_new_requests(timeline, requests, taken);
  return stop_requested_;
}

void Runtime::take_new_requests(bool timeline, std::map<int, std::vector<Request>>* requests,
                                std::vector<std::string>* taken) {
  if (hold_requests_) return;
  for (auto& r : new_requests_) {
    if (timeline) taken->push_back(r.name);
    (*requests)[r.process_set].push_back(std::move(r));
  }
  new_requests_.clear();
}

Runtime::Tunables Runtime::tunables() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tunables_;
}

std::vector<std::pair<std::uint64_t, Tunables>> Runtime::tunables_history() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tunables_history_;
}

void Runtime::loop() {
  Status status = factory_(&comm_);
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
      if (config_.cycle_on_demand) bell_ = comm_->cycle_bell();
      tunables_.hierarchical = comm_->hierarchical();
    }
    start_status_ = status;
    running_ = status.ok();
    started_ = true;
  }
  started_cv_.notify_all();
  if (!status.ok()) return;
  log::set_thread_rank(topology_.rank);

  // One controller per process set, each negotiating among its own ranks over its own
  // communicator. Only the global set (all ranks, id 0) exists so far; another set is
  // another entry here with a communicator over its ranks.
  std::map<int, Controller> sets;
  sets.try_emplace(kGlobalProcessSet, config_, comm_.get());
  FusionBuffer fusion_buffer;
  std::unique_ptr<Autotuner> autotuner;
  if (config_.autotune && topology_.rank == 0) {
    AutotuneOptions options;
    options.warmup_samples = config_.autotune_warmup_samples;
    options.cycles_per_sample = config_.autotune_cycles_per_sample;
    options.log_path = config_.autotune_log;
    options.tune_hierarchical = comm_->can_switch_hierarchical();
    autotuner = std::make_unique<Autotuner>(tunables_, options);
  }
  const auto peer_timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      seconds(config_.peer_timeout_seconds));
  // Negotiation is collective, so every rank must run every cycle. With a CycleBell a rank
  // sleeps until some rank asks for a cycle (because it has new work, see
  // wait_for_cycle). Without one, a rank without local work still cycles: every
  // kMinIdleWait (or cycle time) while any rank is busy, backing off to kMaxIdleWait while
  // every rank is idle. The back-off costs no latency when ranks submit together (each
  // wakes on its own work) and keeps an idle runtime from taking a tenth of a core.
  transport::CycleBell* const bell = bell_;  // set before start() returned; fixed until the end
  bool must_cycle = false;  // the controller has news for the next cycle (bell only)
  std::chrono::steady_clock::duration idle_wait = kMinIdleWait;
  auto last_start = std::chrono::steady_clock::time_point{};
  std::uint64_t cycle_number = 0;
  Status fatal;
  bool shutdown = false;
  std::vector<int> shutdown_ranks, exited_ranks;  // who stopped, for the pending ops' error
  std::vector<std::string> taken;  // timeline: names that entered negotiation this cycle
  while (!shutdown && fatal.ok()) {
    const auto cycle_time = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double, std::milli>(tunables_.cycle_time_ms));
    std::map<int, std::vector<Request>> requests;
    const bool timeline = timeline_.active();
    taken.clear();
    bool want_stop;
    if (bell) {
      bool waiting;  // operations of this rank wait for other ranks: keep a heartbeat
      {
        std::lock_guard<std::mutex> lock(mu_);
        waiting = !table_.empty();
      }
      const auto heartbeat =
          waiting ? last_start + kHeartbeat : std::chrono::steady_clock::time_point::max();
      want_stop = wait_for_cycle(*bell, cycle_number, must_cycle, heartbeat,
                                 last_start + cycle_time, timeline, &requests, &taken);
    } else {
      want_stop = wait_for_work(std::max(idle_wait, cycle_time), last_start + cycle_time, timeline,
                                &requests, &taken);
    }
    const auto cycle_start = std::chrono::steady_clock::now();
    last_start = cycle_start;
    ++cycle_number;
    std::uint64_t fast = 0, slow = 0;
    bool idle = true;
    double busy_bytes = 0;
    bool has_tunables = false;
    Tunables next_tunables;
    Controller::Leave leave = Controller::Leave::kNo;
    if (want_stop) {
      std::lock_guard<std::mutex> lock(mu_);
      leave = stop_at_exit_ ? Controller::Leave::kExit : Controller::Leave::kShutdown;
    }
    for (auto& [id, controller] : sets) {
      Controller::Cycle cycle = controller.run(std::move(requests[id]), leave);
      const auto responded = std::chrono::steady_clock::now();
      if (timeline) {
        mark_first_cycle(taken, responded);
        if (!cycle.responses.empty()) timeline_.mark_cycle(cycle_start, cycle.responses.size());
      }
      idle = idle && cycle.idle && cycle.responses.empty();
      fatal = cycle.fatal;
      if (cycle.shutdown && !shutdown) {
        shutdown = true;
        shutdown_ranks = cycle.shutdown_ranks;
        exited_ranks = cycle.exited_ranks;
      }
      for (const FusionGroup& group :
           plan_fusion(cycle.responses, tunables_.fusion_threshold_bytes)) {
        if (!fatal.ok()) break;
        fatal = execute_group(controller.communicator(), cycle.responses, group, fusion_buffer,
                              transport::Clock::now() + peer_timeout, responded);
      }
      for (const Response& r : cycle.responses) {
        if (!r.is_error()) busy_bytes += static_cast<double>(allreduce_bytes(r));
      }
      if (cycle.has_tunables) {
        has_tunables = true;
        next_tunables = cycle.tunables;
      }
      fast += controller.fast_cycles();
      slow += controller.slow_cycles();
      if (!fatal.ok()) break;
    }
    if (autotuner && busy_bytes > 0 && tunables_ == autotuner->current()) {
      const auto since = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double>(t.time_since_epoch()).count();
      };
      auto change = autotuner->observe(busy_bytes, since(cycle_start),
                                       since(std::chrono::steady_clock::now()));
      if (change) sets.at(kGlobalProcessSet).propose(*change);
    }
    must_cycle = false;
    for (const auto& [id, controller] : sets) must_cycle = must_cycle || controller.wants_cycle();
    idle_wait = idle ? std::min<std::chrono::steady_clock::duration>(idle_wait * 2, kMaxIdleWait)
                     : kMinIdleWait;
    std::lock_guard<std::mutex> lock(mu_);
    fast_cycles_ = fast;
    slow_cycles_ = slow;
    cycles_ = cycle_number;
    if (has_tunables && !(next_tunables == tunables_)) {
      // Every rank got the same list, so every rank switches here, between the same cycles.
      tunables_ = next_tunables;
      tunables_history_.emplace_back(cycle_number, tunables_);
      if (comm_->can_switch_hierarchical()) comm_->set_hierarchical(tunables_.hierarchical);
      KOLO_LOG(kInfo, "autotune") << "fusion threshold " << tunables_.fusion_threshold_bytes
                                  << " bytes, cycle time " << tunables_.cycle_time_ms << " ms"
                                  << (comm_->can_switch_hierarchical()
                                          ? (tunables_.hierarchical ? ", hierarchical allreduce"
                                                                    : ", flat MPI allreduce")
                                          : "");
    }
  }
  if (!fatal.ok()) {
    KOLO_LOG(kError, "runtime") << fatal.message();
    fail_all(fatal);
  } else {
    fail_all(Status(ErrorCode::kShutdown,
                    shutdown_message(shutdown_ranks, exited_ranks, topology_.rank)));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
  timeline_.stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    bell_ = nullptr;  // the communicator owns it
  }
  sets.clear();   // the controllers use the communicator
  comm_.reset();  // on this thread, the only one that uses it
}

}  // namespace kolo::core
