// kolorun's own settings (kolorun_env.h).
#include "launcher/kolorun_env.h"

#include <cstdlib>

#include "launcher/elastic_driver.h"
#include "launcher/lines.h"

namespace kolo::launcher {

const std::vector<KolorunSetting>& kolorun_settings() {
  static const std::vector<KolorunSetting> kSettings = {
      {kLauncherModeVar, "kolorun",
       "kolorun: start the workers itself; mpi: through mpirun, as --mpi"},
      {kSshPortVar, "unset", "the port ssh connects to on other hosts (unset: ssh's own default)"},
      {kTerminalVar, "unset",
       "1: kolorun's stdout counts as a terminal, 0: it does not (unset: isatty). On a\n"
       "      terminal every worker gets KOLO_TERMINAL=1 and a line it redraws with \\r (a\n"
       "      progress bar) is shown in place; otherwise only its last update is passed on"},
  };
  return kSettings;
}

Status read_kolorun_env(const core::Env& env, KolorunEnv* out) {
  const auto value = [&](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  const std::string mode = value(kLauncherModeVar);
  if (mode != "" && mode != "kolorun" && mode != "mpi") {
    return InvalidArgument(std::string(kLauncherModeVar) + "=" + mode +
                           " is not valid: expected kolorun (the default) or mpi");
  }
  out->mpi = mode == "mpi";
  if (const std::string port = value(kSshPortVar); !port.empty()) {
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (*end != '\0' || p < 1 || p > 65535) {
      return InvalidArgument(std::string(kSshPortVar) + "=" + port +
                             " is not a port: expected 1..65535");
    }
    out->ssh_port = static_cast<int>(p);
  }
  out->terminal = is_terminal(env, 1);
  out->elastic_timeout = value(kElasticTimeoutVar);
  return Status::OK();
}

}  // namespace kolo::launcher
