// Config: every KOLO_* runtime option, parsed once into an immutable value.
//
// Options are declared in one table (name, default, one line of documentation) that
// kolorun --help prints; parsing reads an environment map, so tests pass their own.
// Not for: launcher flags (src/launcher) or per-operation options (include/kolo/kolo.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/status.h"

namespace kolo::core {

using Env = std::map<std::string, std::string>;

// The current process environment.
Env process_env();

// Upper bounds of the duration options: a week in seconds (deadlines are kept in
// nanoseconds, which hold about 292 years, so every bound stays far from overflow) and
// a minute for the cycle time.
constexpr double kMaxDurationSeconds = 7 * 24 * 3600;
constexpr double kMaxCycleTimeMs = 60 * 1000;

struct Config {
  int cache_capacity = 1024;             // KOLO_CACHE_CAPACITY
  double cycle_time_ms = 0.0;            // KOLO_CYCLE_TIME_MS
  bool cycle_on_demand = true;           // KOLO_CYCLE_ON_DEMAND (transports with a CycleBell)
  double stall_check_seconds = 60.0;     // KOLO_STALL_CHECK_SECONDS
  double stall_shutdown_seconds = 600;   // KOLO_STALL_SHUTDOWN_SECONDS
  double peer_timeout_seconds = 60.0;    // KOLO_PEER_TIMEOUT_SECONDS
  log::Level log_level = log::kWarning;  // KOLO_LOG_LEVEL
  std::string transport = "auto";        // KOLO_TRANSPORT
  // KOLO_FUSION_THRESHOLD: consecutive compatible allreduces are packed into one buffer
  // of at most this many bytes; 0 disables fusion.
  std::int64_t fusion_threshold_bytes = std::int64_t{64} << 20;
  std::string shm = "auto";             // KOLO_SHM: auto, 0 or 1 (read by the transport table)
  std::string hierarchical = "auto";    // KOLO_HIERARCHICAL: auto, 0 or 1 (transport table)
  std::string timeline_path;            // KOLO_TIMELINE: Chrome-trace file written by rank 0
  bool timeline_mark_cycles = false;    // KOLO_TIMELINE_MARK_CYCLES
  bool autotune = false;                // KOLO_AUTOTUNE
  std::string autotune_log;             // KOLO_AUTOTUNE_LOG
  int autotune_warmup_samples = 3;      // KOLO_AUTOTUNE_WARMUP_SAMPLES
  int autotune_cycles_per_sample = 20;  // KOLO_AUTOTUNE_CYCLES_PER_SAMPLE
};

// Parses the KOLO_* variables of `env` into `out` (starting from defaults). Returns an
// InvalidArgument status naming the variable and the bad value.
Status parse_config(const Env& env, Config* out);

struct OptionDoc {
  const char* name;
  const char* default_value;
  const char* doc;
};

// Runtime options, in the order kolorun --help lists them.
const std::vector<OptionDoc>& config_options();
// Variables kolorun sets for each worker (documented for users of other launchers).
const std::vector<OptionDoc>& launcher_variables();

}  // namespace kolo::core
