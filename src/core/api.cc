// The public free functions of include/kolo/kolo.h, acting on one default Runtime.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "common/deadline.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "core/ops.h"
#include "core/runtime.h"
#include "device/default_device.h"
#include "kolo/kolo.h"
#include "rendezvous/elastic_keys.h"
#include "rendezvous/launcher_keys.h"
#include "rendezvous/prefix_store.h"
#include "startup/config.h"
#include "startup/elastic_membership.h"
#include "startup/job_store.h"
#include "startup/launch_env.h"
#include "transport/table.h"

namespace kolo {
namespace {

// The API layer's state, one object for the process: the default runtime and what its
// inits keep between them. `mu` guards the pointer (init/shutdown against API calls) and
// every other field; the Runtime itself is thread-safe.
struct DefaultRuntime {
  std::mutex mu;
  std::shared_ptr<core::Runtime> runtime KOLO_GUARDED_BY(mu);
  // A program that returns from main (or calls exit()) without kolo::shutdown() still
  // stops the runtime first, in order: its thread must not outlive what it uses, and the
  // other ranks learn that this rank left (as Horovod registers an atexit shutdown).
  // Registered after the first runtime started, so it runs before the exit handlers
  // registered while it started (MPI's finalization, see transport/mpi/mpi_lifetime.h).
  pid_t init_pid = 0;  // the process that registered shutdown_at_exit (set once)
  // The job's store (store jobs only): opened by the first init(), kept until the process
  // exits (after shutdown_at_exit, which is registered later); `inits` counts the inits.
  std::shared_ptr<core::JobStore> job KOLO_GUARDED_BY(mu);
  int inits KOLO_GUARDED_BY(mu) = 0;
  // The environment and options of this process's inits: the first init's settings stay
  // for the elastic resets that start the later generations.
  core::Env env KOLO_GUARDED_BY(mu);
  // Elastic jobs: the generation the runtime is (or was last) in; -1 before the first;
  // and the hosts_updated() calls made in it (they name its broadcasts alike on every
  // member).
  std::int64_t generation KOLO_GUARDED_BY(mu) = -1;
  std::uint64_t hosts_checks KOLO_GUARDED_BY(mu) = 0;
};
DefaultRuntime g_api;

std::shared_ptr<core::Runtime> current() {
  std::lock_guard<std::mutex> lock(g_api.mu);
  if (!g_api.runtime) {
    throw Error(ErrorCode::kNotInitialized,
                "kolo is not initialized: call kolo::init() first (or kolo::shutdown() was "
                "already called)");
  }
  return g_api.runtime;
}

void shutdown_at_exit() {
  // A child forked without exec inherits the handler but not the runtime's thread.
  if (getpid() != g_api.init_pid) return;
  std::shared_ptr<core::Runtime> runtime;
  {
    std::lock_guard<std::mutex> lock(g_api.mu);
    runtime.swap(g_api.runtime);
  }
  if (runtime) runtime->shutdown(/*at_exit=*/true);
}

}  // namespace

void init() { init(std::map<std::string, std::string>{}); }

namespace {

// Starts the default runtime (g_api.mu held, none running). `generation_from` (elastic jobs):
// join kolorun's newest membership of at least this generation. Returns false when this
// elastic worker is not in the job any more (*why says why; nothing started).
bool start_runtime(const core::Env& env, std::int64_t generation_from, std::string* why) {
  core::Config config;
  core::parse_config(env, &config).throw_if_error();
  log::set_level(config.log_level);
  core::LaunchEnv launch;
  core::detect_launch_env(env, &launch).throw_if_error();
  log::set_rank(launch.rank);

  std::string transport = config.transport;
  if (transport == "auto") {
    // An elastic generation of one worker may grow: it runs on Gloo too.
    transport = config.elastic ? "gloo" : core::auto_transport(launch);
  }
  config.transport = transport;
  if (config.elastic) {
    if (launch.launcher != "kolorun" || !launch.uses_store() || config.elastic_id < 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "kolo::init() failed: KOLO_ELASTIC=1 needs kolorun's elastic driver (start the "
                  "job with kolorun --min-np MIN --max-np MAX ...; it sets KOLO_ELASTIC_ID and "
                  "the store's address)");
    }
    if (transport != "gloo") {
      throw Error(ErrorCode::kInvalidArgument,
                  "kolo::init() failed: elastic jobs run on the Gloo transport, but KOLO_TRANSPORT "
                  "is '" +
                      transport +
                      "' (only Gloo's worlds can be rebuilt with other members; an MPI job "
                      "cannot lose or gain processes); unset KOLO_TRANSPORT or set it to gloo");
    }
  }
  const transport::TransportFactory* t = transport::find_transport(transport);
  if (!t) {
    throw Error(ErrorCode::kUnsupported,
                "kolo::init() failed: this kolo build has no '" + transport +
                    "' transport (install libopenmpi-dev for mpi or libgloo-dev for gloo, and "
                    "rebuild)");
  }
  // A job that meets through a store (kolorun, TF_CONFIG, torch-style, Slurm with an
  // address): open it once per process (rank 0 of a job without kolorun hosts it, for the
  // process's life, so that init after shutdown finds it), then wait, bounded, for every
  // task under this init's own prefix ("init/<n>": every rank inits as often). An elastic
  // worker meets its generation's members instead (core/elastic_membership.h), under
  // "elastic/<g>".
  const bool meets = launch.uses_store() && (launch.size > 1 || config.elastic);
  if (meets && !g_api.job) {
    auto job = std::make_shared<core::JobStore>();
    Status s = core::open_job_store(launch, config, job.get());
    if (!s.ok()) throw_error(s.code(), "kolo::init() failed: " + s.message());
    g_api.job = std::move(job);
  }
  transport::TransportContext context;
  if (config.elastic) {
    core::ElasticMembership m;
    Status s = core::join_generation(*g_api.job->store, config.elastic_id, generation_from,
                                     config.elastic_timeout_seconds, &m);
    if (!s.ok()) throw_error(s.code(), "kolo::init() failed: " + s.message());
    if (m.removed) {
      *why = m.why;
      return false;
    }
    launch.rank = m.rank;
    launch.size = m.size;
    launch.local_rank = m.local_rank;
    launch.local_size = m.local_size;
    log::set_rank(launch.rank);
    g_api.generation = m.generation;
    g_api.hosts_checks = 0;
    context = core::transport_context(config, launch);
    context.store = g_api.job->store;
    context.store_prefix = rendezvous::elastic_keys::generation_prefix(m.generation);
    context.launcher_prefix = rendezvous::elastic_keys::launcher_prefix(m.generation);
  } else {
    context = core::transport_context(config, launch);
    if (meets) {
      const std::string prefix = "init/" + std::to_string(g_api.inits++);
      const std::shared_ptr<rendezvous::Store> root = g_api.job->store;
      g_api.job->store = std::make_shared<rendezvous::PrefixStore>(root, prefix);
      Status s = core::join_job(*g_api.job, launch, config.start_timeout_seconds);
      g_api.job->store = root;
      if (!s.ok()) throw_error(s.code(), "kolo::init() failed: " + s.message());
      context.store = root;
      context.store_prefix = prefix;
    }
  }
  context.deadline = deadline_after(config.elastic ? config.elastic_timeout_seconds
                                                   : config.start_timeout_seconds);
  std::string unavailable;
  if (!t->available(context, &unavailable)) {
    throw Error(ErrorCode::kInvalidArgument, "kolo::init() failed: " + unavailable);
  }
  core::Runtime::CommunicatorFactory factory =
      [t, context](std::unique_ptr<transport::Communicator>* out) {
        return transport::create_communicator(*t, context, out);
      };
  auto runtime = std::make_shared<core::Runtime>(config, factory);
  if (device::default_device_kind() != nullptr) {
    // CUDA tensors run on the device path (NCCL), made at the first of them.
    device::DefaultDeviceOptions d;
    d.local_rank = launch.local_rank;
    d.timeout_seconds = config.peer_timeout_seconds;
    runtime->set_device_factory([d](int index, std::unique_ptr<device::Device>* out) mutable {
      d.index = index;
      return device::make_default_device(d, out);
    });
  }
  if (launch.launcher == "kolorun" && meets && !config.elastic) {
    // kolorun chooses which worker ended the job; a rank whose operations fail because
    // others left says so, so that its own exit is not taken for the cause (it exits
    // first, while the rank that left is still ending).
    std::shared_ptr<rendezvous::Store> store = g_api.job->store;
    const int rank = launch.rank;
    runtime->set_end_observer([store, rank](const std::vector<int>& left) {
      std::string ranks;
      for (int r : left) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      (void)store->set(rendezvous::launcher_keys::after_key(rank), ranks);
    });
  }
  Status s = runtime->start();
  if (!s.ok()) {
    runtime->shutdown();
    throw_error(s.code(), "kolo::init() failed: " + s.message());
  }
  const auto& topo = runtime->topology();
  if (launch.launcher != "none" && (topo.rank != launch.rank || topo.size != launch.size)) {
    KOLO_LOG(kWarning, "init") << launch.launcher << " says rank " << launch.rank << " of "
                               << launch.size << " but the " << transport << " transport says rank "
                               << topo.rank << " of " << topo.size << "; using the transport's";
  }
  if (config.elastic) {
    KOLO_LOG(kInfo, "elastic") << "generation " << g_api.generation << ": rank " << topo.rank
                               << " of " << topo.size;
  }
  g_api.runtime = std::move(runtime);
  static std::once_flag registered;
  std::call_once(registered, [] {
    g_api.init_pid = getpid();
    std::atexit(shutdown_at_exit);
  });
  return true;
}

}  // namespace

void init(const std::map<std::string, std::string>& settings) {
  std::lock_guard<std::mutex> lock(g_api.mu);
  if (g_api.runtime) return;
  core::Env env = core::process_env();
  for (const auto& [name, value] : settings) env[name] = value;
  core::Config config;
  core::parse_config(env, &config).throw_if_error();
  // The first generation an elastic worker joins: the one kolorun started it for, or the
  // one after the last it was in (init after shutdown).
  const std::int64_t from =
      g_api.generation >= 0 ? g_api.generation + 1 : config.elastic_generation;
  g_api.env = env;
  std::string why;
  if (!start_runtime(env, from, &why)) {
    throw Error(ErrorCode::kShutdown,
                "kolo::init() failed: this worker is not part of the "
                "elastic job any more: " +
                    why);
  }
}

void shutdown() {
  std::shared_ptr<core::Runtime> runtime;
  {
    std::lock_guard<std::mutex> lock(g_api.mu);
    runtime.swap(g_api.runtime);
  }
  if (runtime) runtime->shutdown();
}

namespace elastic {

namespace {

// g_api.mu held.
bool enabled_locked() {
  core::Config config;
  return core::parse_config(g_api.env.empty() ? core::process_env() : g_api.env, &config).ok() &&
         config.elastic;
}

}  // namespace

bool enabled() {
  std::lock_guard<std::mutex> lock(g_api.mu);
  return enabled_locked();
}

int generation() {
  std::lock_guard<std::mutex> lock(g_api.mu);
  return g_api.runtime && enabled_locked() ? static_cast<int>(g_api.generation) : -1;
}

bool hosts_updated() {
  std::shared_ptr<rendezvous::Store> store;
  std::int64_t g = -1;
  std::uint64_t check = 0;
  {
    std::lock_guard<std::mutex> lock(g_api.mu);
    if (!enabled_locked() || !g_api.runtime) return false;
    g = g_api.generation;
    check = g_api.hosts_checks++;
    if (g_api.runtime->topology().rank == 0) store = g_api.job->store;
  }
  // Rank 0 decides, so every rank of the generation answers alike at this point.
  std::int64_t newer = 0;
  if (store) {
    bool exists = false;
    Status s = core::newer_plan_exists(*store, g, &exists);
    if (!s.ok()) {
      throw_error(s.code(),
                  "kolo::elastic::hosts_updated(): cannot read the job's store: " + s.message());
    }
    newer = exists ? 1 : 0;
  }
  BroadcastOptions options;
  options.name = "kolo.elastic.hosts_updated." + std::to_string(g) + "." + std::to_string(check);
  broadcast(TensorView{&newer, DataType::kInt64, {}}, options);
  return newer != 0;
}

bool reset() {
  std::lock_guard<std::mutex> lock(g_api.mu);
  if (!enabled_locked()) {
    throw Error(ErrorCode::kInvalidArgument,
                "kolo::elastic::reset(): this job is not elastic (start it with kolorun --min-np "
                "MIN --max-np MAX ...)");
  }
  std::shared_ptr<core::Runtime> runtime;
  runtime.swap(g_api.runtime);
  const std::int64_t last = g_api.generation;
  if (runtime) runtime->shutdown();
  runtime.reset();
  if (g_api.job && last >= 0) {
    // kolorun writes the next plan once it has reaped a worker that died; a generation
    // that failed with every process alive (a peer timed out) needs asking for one.
    const Deadline until = deadline_after(1.0);
    bool newer = false;
    while (core::newer_plan_exists(*g_api.job->store, last, &newer).ok() && !newer &&
           Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!newer) {
      std::int64_t requests = 0;
      (void)g_api.job->store->add(rendezvous::elastic_keys::reset_requests_key(last), 1, &requests);
    }
  }
  std::string why;
  if (!start_runtime(g_api.env, last + 1, &why)) {
    KOLO_LOG(kWarning, "elastic") << "this worker leaves the elastic job: " << why;
    return false;
  }
  return true;
}

}  // namespace elastic

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_api.mu);
  return g_api.runtime != nullptr;
}

bool has_device_path() { return current()->has_device_path(); }

int rank() { return current()->topology().rank; }
int size() { return current()->topology().size; }
int local_rank() { return current()->topology().local_rank; }
int local_size() { return current()->topology().local_size; }
int cross_rank() { return current()->topology().cross_rank; }
int cross_size() { return current()->topology().cross_size; }

Handle allreduce_async(const TensorView& input, const TensorView& output,
                       const AllreduceOptions& options) {
  // One copy of each view (an initializer list would copy them twice).
  std::vector<TensorView> inputs, outputs;
  inputs.reserve(1);
  outputs.reserve(1);
  inputs.push_back(input);
  outputs.push_back(output);
  return core::ops::allreduce(*current(), std::move(inputs), std::move(outputs), options,
                              /*grouped=*/false);
}
void allreduce(const TensorView& input, const TensorView& output, const AllreduceOptions& options) {
  allreduce_async(input, output, options).wait();
}
void allreduce(const TensorView& tensor, const AllreduceOptions& options) {
  allreduce_async(tensor, tensor, options).wait();
}

Handle grouped_allreduce_async(const std::vector<TensorView>& inputs,
                               const std::vector<TensorView>& outputs,
                               const AllreduceOptions& options) {
  return core::ops::allreduce(*current(), inputs, outputs, options, /*grouped=*/true);
}
void grouped_allreduce(const std::vector<TensorView>& inputs,
                       const std::vector<TensorView>& outputs, const AllreduceOptions& options) {
  grouped_allreduce_async(inputs, outputs, options).wait();
}

Handle allgather_async(const TensorView& input, const AllgatherOptions& options) {
  return core::ops::allgather(*current(), input, options);
}
Tensor allgather(const TensorView& input, const AllgatherOptions& options) {
  Handle h = allgather_async(input, options);
  h.wait();
  return std::move(h.mutable_output());
}

Handle broadcast_async(const TensorView& tensor, const BroadcastOptions& options) {
  return core::ops::broadcast(*current(), tensor, options);
}
void broadcast(const TensorView& tensor, const BroadcastOptions& options) {
  broadcast_async(tensor, options).wait();
}

Handle alltoall_async(const TensorView& input, const AlltoallOptions& options) {
  return core::ops::alltoall(*current(), input, options);
}
AlltoallResult alltoall(const TensorView& input, const AlltoallOptions& options) {
  Handle h = alltoall_async(input, options);
  h.wait();
  return {std::move(h.mutable_output()), h.received_splits()};
}

Handle reducescatter_async(const TensorView& input, const ReducescatterOptions& options) {
  return core::ops::reducescatter(*current(), input, options);
}
Tensor reducescatter(const TensorView& input, const ReducescatterOptions& options) {
  Handle h = reducescatter_async(input, options);
  h.wait();
  return std::move(h.mutable_output());
}

Handle barrier_async(const BarrierOptions& options) {
  return core::ops::barrier(*current(), options);
}
void barrier(const BarrierOptions& options) { barrier_async(options).wait(); }

Handle join_async() { return core::ops::join(*current()); }
int join() {
  Handle h = join_async();
  h.wait();
  return h.last_joined_rank();
}

ProcessSet global_process_set() { return core::ops::global_process_set(*current()); }
ProcessSet process_set(int id) { return core::ops::process_set(*current(), id); }
ProcessSet add_process_set(std::vector<int> ranks) {
  return core::ops::add_process_set(*current(), std::move(ranks));
}
void remove_process_set(const ProcessSet& set) { core::ops::remove_process_set(*current(), set); }

void start_timeline(const std::string& path, bool mark_cycles) {
  current()->start_timeline(path, mark_cycles).throw_if_error();
}

void stop_timeline() { current()->stop_timeline(); }

}  // namespace kolo
