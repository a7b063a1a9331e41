// Config: every KOLO_* runtime option, parsed once into an immutable value.
//
// Each option is declared once, in startup/options.def (type, member, variable, default,
// accepted values, one line of documentation); that list makes the members below, the
// parse and the rows kolorun --help prints. Parsing reads an environment map, so tests
// pass their own. Layers get their slice of the result (the transports: a
// transport::TransportContext, see startup/launch_env.h) and never read the environment.
// Not for: launcher flags (src/launcher), per-operation options (include/kolo/kolo.h), or
// the launch environment (rank, size, hosts: startup/launch_env.h).
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
// The shortest KOLO_ELASTIC_TIMEOUT_SECONDS (kolorun checks --elastic-timeout against the
// same range before its workers would refuse it).
constexpr double kMinElasticTimeoutSeconds = 0.001;

// One member per line of startup/options.def, with its name, type and default there
// (cache_capacity, cycle_time_ms, peer_timeout_seconds, fusion_threshold_bytes, ...).
struct Config {
#define KOLO_OPTION(type, member, name, default_value, accepts, doc) type member = default_value;
#include "startup/options.def"
#undef KOLO_OPTION
};

// Parses the KOLO_* variables of `env` into `out` (starting from defaults). Returns an
// InvalidArgument status naming the variable and the bad value.
Status parse_config(const Env& env, Config* out);

struct OptionDoc {
  const char* name;
  const char* default_value;  // as a value of the variable; "" = unset
  const char* doc;
  const char* accepts;  // the values allowed, e.g. "an integer in [0, 1048576]"; "" = any
};

// Runtime options, in the order kolorun --help lists them.
const std::vector<OptionDoc>& config_options();
// Variables kolorun sets for each worker (documented for users of other launchers).
const std::vector<OptionDoc>& launcher_variables();

// One of them: set to 1 by kolorun for every worker when its own stdout is a terminal (or
// is itself a kolorun's on a terminal), 0 when not. Progress bars then redraw in place, and
// kolorun's shims and remote wrappers pass redraws on.
inline constexpr const char* kTerminalVar = "KOLO_TERMINAL";
// Whether output on `fd` ends up on a terminal: KOLO_TERMINAL=1 or 0 in `env` decides;
// unset (or anything else), isatty(fd) (false for an fd < 0).
bool output_is_terminal(const Env& env, int fd);

}  // namespace kolo::core
