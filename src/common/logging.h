// Levelled logging with subsystems and the rank in every line, cheap when off.
//
//   KOLO_LOG(kWarning, "stall") << "tensor " << name << " ...";
//
// The level comes from KOLO_LOG_LEVEL (trace, debug, info, warning, error; default
// warning). Lines go to stderr as "[kolo <rank> <level> <subsystem>] message". The
// level and default rank are process-wide (set once at init). Besides these, kolo's only
// process-wide state is the API layer's default runtime (one object in core/api.cc).
#pragma once

#include <sstream>
#include <string>

namespace kolo::log {

enum Level { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kOff = 5 };

bool enabled(Level level);
void set_level(Level level);
// Parses "trace".."error"/"off" (or 0..5); false if not recognised.
bool parse_level(const std::string& text, Level* out);
void set_rank(int rank);  // process default; -1 = not known yet
// The rank for lines logged by the calling thread (a runtime's background thread), so
// tests running several ranks as threads of one process log the right rank.
void set_thread_rank(int rank);

class Line {
 public:
  Line(Level level, const char* subsystem);
  ~Line();
  template <typename T>
  Line& operator<<(const T& v) {
    out_ << v;
    return *this;
  }

 private:
  Level level_;
  const char* subsystem_;
  std::ostringstream out_;
};

}  // namespace kolo::log

#define KOLO_LOG(level, subsystem)                 \
  if (!::kolo::log::enabled(::kolo::log::level)) { \
  } else                                           \
    ::kolo::log::Line(::kolo::log::level, subsystem)
