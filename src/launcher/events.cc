// Worker exit markers (see events.h).
#include "launcher/events.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

namespace kolo::launcher {
namespace {

bool parse_int(const std::string& text, int* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || v < 0 || v > (1L << 30)) return false;
  *out = static_cast<int>(v);
  return true;
}

// "KOLO_LAUNCHER_EVENT token=T ": how every marker of the job starts.
std::string marker_head(const std::string& token) {
  return std::string(kEventPrefix) + "token=" + token + " ";
}

}  // namespace

std::string format_exit_event(const WorkerExit& e, const std::string& token) {
  std::string s = marker_head(token);
  s += "rank=" + std::to_string(e.rank) + " host=" + (e.host.empty() ? "?" : e.host);
  if (e.signal != 0) {
    s += " signal=" + std::to_string(e.signal);
  } else {
    s += " exit=" + std::to_string(e.exit_code);
  }
  if (e.stop == Stop::kByJob) s += " stopped=job";
  if (e.stop == Stop::kFromOutside) s += " stopped=outside";
  if (e.time_us > 0) s += " t=" + std::to_string(e.time_us);
  return s;
}

bool parse_exit_event(const std::string& line, const std::string& token, WorkerExit* out) {
  const std::string head = marker_head(token);
  if (token.empty() || line.rfind(head, 0) != 0) return false;
  std::stringstream words(line.substr(head.size()));
  WorkerExit e;
  bool have_rank = false, have_host = false, have_end = false;
  std::string word;
  while (words >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    if (key == "rank") {
      have_rank = parse_int(value, &e.rank);
    } else if (key == "host") {
      e.host = value;
      have_host = !value.empty();
    } else if (key == "exit") {
      have_end = parse_int(value, &e.exit_code);
    } else if (key == "signal") {
      have_end = parse_int(value, &e.signal) && e.signal > 0;
    } else if (key == "stopped") {
      e.stop = value == "outside" ? Stop::kFromOutside : Stop::kByJob;
    } else if (key == "t") {
      e.time_us = std::strtoll(value.c_str(), nullptr, 10);
    }
    // Unknown keys are skipped so that later shims can add fields.
  }
  if (!have_rank || !have_host || !have_end) return false;
  *out = e;
  return true;
}

bool find_exit_event(const std::string& line, const std::string& token, std::string* before,
                     WorkerExit* out) {
  if (token.empty()) return false;
  const std::string head = marker_head(token);
  const std::size_t at = line.find(head);
  if (at == std::string::npos || !parse_exit_event(line.substr(at), token, out)) return false;
  *before = line.substr(0, at);
  return true;
}

std::string make_event_token() {
  std::random_device device;
  char text[17];
  std::snprintf(text, sizeof text, "%08x%08x", device(), device());
  return text;
}

std::string describe_exit(const WorkerExit& e) {
  std::string s = e.name.empty() ? "rank " + std::to_string(e.rank) : e.name;
  if (!e.host.empty() && e.host != "?") s += " (host " + e.host + ")";
  std::string how;
  if (e.signal != 0) {
    const char* name = strsignal(e.signal);
    how = "was killed by signal " + std::to_string(e.signal);
    if (name != nullptr) how += std::string(" (") + name + ")";
  } else {
    how = "exited with status " + std::to_string(e.exit_code);
  }
  if (e.shim_lost) return s + ": its worker shim " + how + " before it reported";
  s += " " + how;
  if (e.stop == Stop::kFromOutside) s += " after it was stopped from outside the job";
  return s;
}

}  // namespace kolo::launcher
