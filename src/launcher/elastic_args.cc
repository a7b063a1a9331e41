#include "launcher/elastic_args.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "launcher/hosts.h"
#include "startup/config.h"

namespace kolo::launcher {

Status elastic_options_from_args(const ElasticArgs& a, ElasticOptions* e, LaunchRequest* request) {
  if (a.np == 0 && a.min_np == 0) {
    return InvalidArgument(
        "an elastic job needs -np N or --min-np MIN: the workers it starts with and the "
        "fewest it trains with (run kolorun --help for usage)");
  }
  e->min_np = a.min_np > 0 ? a.min_np : a.np;
  const int np = a.np > 0 ? a.np : e->min_np;
  e->max_np = a.max_np;
  e->start_np = np;
  if (e->min_np < 1)
    return InvalidArgument("--min-np " + std::to_string(e->min_np) + " must be at least 1");
  if (e->max_np != 0 && e->max_np < e->min_np) {
    return InvalidArgument("--min-np " + std::to_string(e->min_np) + " is above --max-np " +
                           std::to_string(e->max_np) +
                           ": the fewest workers cannot exceed the most");
  }
  if (np < e->min_np || (e->max_np > 0 && np > e->max_np)) {
    return InvalidArgument("-np " + std::to_string(np) + " is outside --min-np " +
                           std::to_string(e->min_np) +
                           (e->max_np > 0 ? " .. --max-np " + std::to_string(e->max_np) : ""));
  }
  if (a.slots < 1)
    return InvalidArgument("--slots " + std::to_string(a.slots) + " must be at least 1");
  if (a.reset_limit < -1) {
    return InvalidArgument("--reset-limit " + std::to_string(a.reset_limit) + " must be 0 or more");
  }
  if (!a.cooldown.empty()) {
    if (!(a.cooldown[0] > 0) || !(a.cooldown[1] >= a.cooldown[0])) {
      return InvalidArgument("--blacklist-cooldown-range " + std::to_string(a.cooldown[0]) + " " +
                             std::to_string(a.cooldown[1]) + ": expected 0 < LO <= HI (seconds)");
    }
    e->cooldown = Cooldown{a.cooldown[0], a.cooldown[1]};
  }
  // One range for kolorun and its workers, which take --elastic-timeout as
  // KOLO_ELASTIC_TIMEOUT_SECONDS (startup/options.def checks the same bounds).
  double timeout = a.elastic_timeout;
  std::string timeout_name = "--elastic-timeout";
  if (!a.elastic_timeout_env.empty()) {
    timeout_name = std::string(kElasticTimeoutVar) + " (--elastic-timeout's default)";
    char* end = nullptr;
    timeout = std::strtod(a.elastic_timeout_env.c_str(), &end);
    if (end == a.elastic_timeout_env.c_str() || *end != '\0') {
      return InvalidArgument(std::string(kElasticTimeoutVar) + "=" + a.elastic_timeout_env +
                             " is not a number of seconds; give --elastic-timeout or unset it");
    }
  }
  const auto in_range = [](double s) {
    return std::isfinite(s) && s >= core::kMinElasticTimeoutSeconds &&
           s <= core::kMaxDurationSeconds;
  };
  if (!in_range(timeout) || !in_range(a.discovery_interval)) {
    const bool t = !in_range(timeout);
    char value[64];
    std::snprintf(value, sizeof(value), "%g", t ? timeout : a.discovery_interval);
    char range[64];
    std::snprintf(range, sizeof(range), "[%g, %g]", core::kMinElasticTimeoutSeconds,
                  core::kMaxDurationSeconds);
    return InvalidArgument((t ? timeout_name : std::string("--discovery-interval")) + " " + value +
                           " is outside " + range + " seconds (at most 7 days)");
  }
  e->reset_limit = a.reset_limit;
  e->default_slots = a.slots;
  e->elastic_timeout_s = timeout;
  e->discovery_interval_s = a.discovery_interval;
  e->discovery_script = a.discovery_script;
  request->np = np;
  request->grace_seconds = a.grace_seconds;
  request->program = a.program;
  if (!request->program.empty() && request->program.front() == "--") {
    request->program.erase(request->program.begin());
  }
  if (request->program.empty())
    return InvalidArgument("no program given: kolorun [OPTIONS] PROGRAM [ARGS...]");
  if (!a.discovery_script.empty()) {
    if (a.hosts_given || !a.hostfile.empty()) {
      return InvalidArgument("--host-discovery-script and " +
                             std::string(a.hosts_given ? "-H" : "--hostfile") +
                             " both name the hosts: give one");
    }
    // The first run must work: later failures keep the last hosts.
    if (Status s = run_discovery_script(a.discovery_script, a.slots, kDiscoveryTimeoutSeconds,
                                        &request->hosts);
        !s.ok()) {
      return InvalidArgument(s.message() + " (on its first run)");
    }
  } else if (a.hosts_given) {
    if (Status s = parse_host_list(a.host_list, &request->hosts); !s.ok()) {
      return InvalidArgument("-H: " + s.message());
    }
  } else if (!a.hostfile.empty()) {
    if (Status s = read_hostfile(a.hostfile, &request->hosts); !s.ok()) {
      return InvalidArgument(s.message());
    }
  } else {
    request->hosts = {{"localhost", std::max(np, e->max_np)}};
  }
  if (a.discovery_script.empty() && total_slots(request->hosts) < e->min_np) {
    return InvalidArgument("--min-np " + std::to_string(e->min_np) + " is more than the " +
                           std::to_string(total_slots(request->hosts)) + " slots of " +
                           format_host_list(request->hosts) +
                           " (fixed hosts: add slots, or give --host-discovery-script)");
  }
  e->hosts = request->hosts;
  return Status::OK();
}

}  // namespace kolo::launcher
