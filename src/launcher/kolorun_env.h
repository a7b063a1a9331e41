// kolorun's own settings, read once from its environment: each declared once, in
// kolorun_settings(), which also gives kolorun --help its rows. Not for: the runtime
// options every worker reads (startup/options.def) or the variables kolorun gives each
// worker (startup/config.h's launcher_variables()).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "startup/config.h"

namespace kolo::launcher {

inline constexpr const char* kLauncherModeVar = "KOLO_LAUNCHER_MODE";
inline constexpr const char* kSshPortVar = "KOLO_SSH_PORT";

struct KolorunSetting {
  const char* name;
  const char* default_value;  // as --help says it
  const char* doc;
};
// In the order kolorun --help lists them.
const std::vector<KolorunSetting>& kolorun_settings();

struct KolorunEnv {
  // KOLO_LAUNCHER_MODE: kolorun (default, "" too) or mpi (as --mpi).
  bool mpi = false;
  // KOLO_SSH_PORT: 1..65535; 0 when unset (ssh's own default).
  int ssh_port = 0;
  // KOLO_TERMINAL=1/0, unset: whether kolorun's stdout is a terminal.
  bool terminal = false;
  // KOLO_ELASTIC_TIMEOUT_SECONDS as written ("" when unset): --elastic-timeout's default,
  // checked with it (elastic_args.h).
  std::string elastic_timeout;
};

// Reads and checks them all; kInvalidArgument naming the variable, its value and what it
// takes.
Status read_kolorun_env(const core::Env& env, KolorunEnv* out);

}  // namespace kolo::launcher
