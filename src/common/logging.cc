#include "common/logging.h"

#include <atomic>
#include <cstdio>

namespace kolo::log {
namespace {
std::atomic<int> g_level{kWarning};
std::atomic<int> g_rank{-1};
thread_local int t_rank = -1;
const char* kNames[] = {"trace", "debug", "info", "warning", "error", "off"};
}  // namespace

bool enabled(Level level) { return level >= g_level.load(std::memory_order_relaxed); }
void set_level(Level level) { g_level.store(level); }
void set_rank(int rank) { g_rank.store(rank); }
void set_thread_rank(int rank) { t_rank = rank; }

bool parse_level(const std::string& text, Level* out) {
  for (int i = 0; i <= kOff; ++i) {
    if (text == kNames[i] || text == std::to_string(i)) {
      *out = static_cast<Level>(i);
      return true;
    }
  }
  if (text == "warn") {
    *out = kWarning;
    return true;
  }
  return false;
}

Line::Line(Level level, const char* subsystem) : level_(level), subsystem_(subsystem) {}

Line::~Line() {
  const int rank = t_rank >= 0 ? t_rank : g_rank.load();
  std::string prefix = "[kolo ";
  prefix += rank >= 0 ? std::to_string(rank) : std::string("?");
  prefix += " ";
  prefix += kNames[level_];
  prefix += " ";
  prefix += subsystem_;
  prefix += "] ";
  // One fwrite per line keeps lines from different threads whole.
  const std::string line = prefix + out_.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace kolo::log
