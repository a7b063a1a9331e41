#include "core/config.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/format.h"

extern char** environ;

namespace kolo::core {

Env process_env() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

const std::vector<OptionDoc>& config_options() {
  static const std::vector<OptionDoc> kOptions = {
      {"KOLO_CACHE_CAPACITY", "1024",
       "response cache entries (steady-state fast path: one bit-vector AND per cycle); 0 disables"},
      {"KOLO_CYCLE_TIME_MS", "0",
       "least time between the starts of two negotiation cycles: work arriving sooner waits and "
       "is negotiated (and fused) with what follows; 0 = a cycle starts as soon as work arrives; "
       "0 to 60000"},
      {"KOLO_CYCLE_ON_DEMAND", "1",
       "1: on the shared-memory (and in-process) transport a negotiation cycle runs only when "
       "some rank has submitted work (and every 100 ms while work waits for other ranks), so "
       "idle and waiting ranks do not wake; 0: every rank cycles every 1 ms while any rank is "
       "busy, as over MPI"},
      {"KOLO_STALL_CHECK_SECONDS", "60",
       "warn (on rank 0) when some ranks submitted a tensor and others did not for this long, "
       "or a rank has not taken part in negotiation for this long (or half the peer timeout, if "
       "shorter: stopped or hung); 0 = off; "
       "at most 604800 (a week)"},
      {"KOLO_STALL_SHUTDOWN_SECONDS", "600",
       "after a stall this long, fail every pending operation on every rank and stop the "
       "runtime, so the job ends instead of waiting; 0 = never (wait for the missing ranks "
       "forever); at most 604800"},
      {"KOLO_PEER_TIMEOUT_SECONDS", "60",
       "a rank that does not answer for this long is reported dead; pending operations fail; "
       "0.001 to 604800"},
      {"KOLO_LOG_LEVEL", "warning", "trace, debug, info, warning, error or off"},
      {"KOLO_TRANSPORT", "auto",
       "auto (mpi when started by kolorun/mpirun/srun with more than one rank, else local), mpi, "
       "local"},
      {"KOLO_FUSION_THRESHOLD", "67108864",
       "bytes: consecutive allreduces of one cycle with the same dtype and reduction are packed "
       "into one buffer up to this size (scaling done while packing); 0 disables fusion"},
      {"KOLO_TIMELINE", "",
       "path (unset: off): rank 0 writes a Chrome-trace JSON timeline (negotiate, wait_for_ranks, "
       "pack, "
       "communicate, unpack per tensor) that Perfetto and chrome://tracing open"},
      {"KOLO_TIMELINE_MARK_CYCLES", "0", "1: the timeline also marks every negotiation cycle"},
      {"KOLO_AUTOTUNE", "0",
       "1: during the first steps rank 0 tries fusion thresholds and cycle times (and, across "
       "hosts, hierarchical vs flat allreduce) and settles on the one with the most bytes per "
       "second; every rank switches at the same cycle"},
      {"KOLO_AUTOTUNE_LOG", "",
       "path (unset: off): rank 0 writes each autotune sample as a CSV line"},
      {"KOLO_AUTOTUNE_WARMUP_SAMPLES", "3", "autotune samples discarded before the search"},
      {"KOLO_AUTOTUNE_CYCLES_PER_SAMPLE", "20",
       "busy negotiation cycles measured per autotune sample"},
      {"KOLO_HIERARCHICAL", "auto",
       "auto (hierarchical allreduce: shared memory inside each host, MPI across hosts, when "
       "there are several hosts with equal numbers of ranks), 0 (off), 1 (required)"},
      {"KOLO_SHM", "auto",
       "auto (shared-memory transport when every rank is on one host), 0 (off: plain MPI), "
       "1 (required: error if ranks span hosts)"},
  };
  return kOptions;
}

const std::vector<OptionDoc>& launcher_variables() {
  static const std::vector<OptionDoc> kVars = {
      {"KOLO_RANK", "set by kolorun", "rank of the worker in [0, KOLO_SIZE)"},
      {"KOLO_SIZE", "set by kolorun", "number of workers"},
      {"KOLO_LOCAL_RANK", "set by kolorun", "rank among the workers on this host"},
      {"KOLO_LOCAL_SIZE", "set by kolorun", "workers on this host"},
      {"KOLO_CROSS_RANK", "set by kolorun",
       "rank among workers with the same local rank (host index)"},
      {"KOLO_CROSS_SIZE", "set by kolorun", "hosts with a worker of this local rank"},
  };
  return kVars;
}

namespace {

Status bad(const std::string& name, const std::string& value, const std::string& want) {
  return InvalidArgument(name + "=" + value + " is not valid: expected " + want);
}

// A finite number in [min, max] (strtod also takes "inf" and "nan": both refused).
Status read_double(const Env& env, const char* name, double min, double max, double* out) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return Status::OK();
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || !std::isfinite(v) || !(v >= min) ||
      !(v <= max)) {
    return bad(name, it->second,
               "a number in [" + number_string(min) + ", " + number_string(max) + "]");
  }
  *out = v;
  return Status::OK();
}

Status read_int64(const Env& env, const char* name, long long min, long long max,
                  std::int64_t* out) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return Status::OK();
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0' || v < min || v > max) {
    return bad(name, it->second,
               "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  *out = v;
  return Status::OK();
}

Status read_int(const Env& env, const char* name, long min, long max, int* out) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return Status::OK();
  char* end = nullptr;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0' || v < min || v > max) {
    return bad(name, it->second,
               "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  *out = static_cast<int>(v);
  return Status::OK();
}

// "0" or "1" (unset or empty: *out keeps its default).
Status read_flag(const Env& env, const char* name, bool* out) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return Status::OK();
  if (it->second != "0" && it->second != "1") return bad(name, it->second, "0 or 1");
  *out = it->second == "1";
  return Status::OK();
}

}  // namespace

Status parse_config(const Env& env, Config* out) {
  Config c;
  KOLO_RETURN_IF_ERROR(read_int(env, "KOLO_CACHE_CAPACITY", 0, 1 << 20, &c.cache_capacity));
  KOLO_RETURN_IF_ERROR(
      read_double(env, "KOLO_CYCLE_TIME_MS", 0, kMaxCycleTimeMs, &c.cycle_time_ms));
  KOLO_RETURN_IF_ERROR(
      read_double(env, "KOLO_STALL_CHECK_SECONDS", 0, kMaxDurationSeconds, &c.stall_check_seconds));
  KOLO_RETURN_IF_ERROR(read_double(env, "KOLO_STALL_SHUTDOWN_SECONDS", 0, kMaxDurationSeconds,
                                   &c.stall_shutdown_seconds));
  KOLO_RETURN_IF_ERROR(read_double(env, "KOLO_PEER_TIMEOUT_SECONDS", 0.001, kMaxDurationSeconds,
                                   &c.peer_timeout_seconds));
  if (auto it = env.find("KOLO_LOG_LEVEL"); it != env.end() && !it->second.empty()) {
    if (!log::parse_level(it->second, &c.log_level)) {
      return bad("KOLO_LOG_LEVEL", it->second, "trace, debug, info, warning, error or off");
    }
  }
  if (auto it = env.find("KOLO_TRANSPORT"); it != env.end() && !it->second.empty()) {
    if (it->second != "auto" && it->second != "mpi" && it->second != "local") {
      return bad("KOLO_TRANSPORT", it->second, "auto, mpi or local");
    }
    c.transport = it->second;
  }
  KOLO_RETURN_IF_ERROR(read_int64(env, "KOLO_FUSION_THRESHOLD", 0, std::int64_t{1} << 40,
                                  &c.fusion_threshold_bytes));
  if (auto it = env.find("KOLO_TIMELINE"); it != env.end()) c.timeline_path = it->second;
  KOLO_RETURN_IF_ERROR(read_flag(env, "KOLO_TIMELINE_MARK_CYCLES", &c.timeline_mark_cycles));
  KOLO_RETURN_IF_ERROR(read_flag(env, "KOLO_AUTOTUNE", &c.autotune));
  KOLO_RETURN_IF_ERROR(read_flag(env, "KOLO_CYCLE_ON_DEMAND", &c.cycle_on_demand));
  if (auto it = env.find("KOLO_AUTOTUNE_LOG"); it != env.end()) c.autotune_log = it->second;
  KOLO_RETURN_IF_ERROR(
      read_int(env, "KOLO_AUTOTUNE_WARMUP_SAMPLES", 1, 1000, &c.autotune_warmup_samples));
  KOLO_RETURN_IF_ERROR(
      read_int(env, "KOLO_AUTOTUNE_CYCLES_PER_SAMPLE", 1, 1000000, &c.autotune_cycles_per_sample));
  if (auto it = env.find("KOLO_HIERARCHICAL"); it != env.end() && !it->second.empty()) {
    if (it->second != "auto" && it->second != "0" && it->second != "1") {
      return bad("KOLO_HIERARCHICAL", it->second, "auto, 0 or 1");
    }
    c.hierarchical = it->second;
  }
  if (auto it = env.find("KOLO_SHM"); it != env.end() && !it->second.empty()) {
    if (it->second != "auto" && it->second != "0" && it->second != "1") {
      return bad("KOLO_SHM", it->second, "auto, 0 or 1");
    }
    c.shm = it->second;
  }
  *out = c;
  return Status::OK();
}

}  // namespace kolo::core
