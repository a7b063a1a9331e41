#include "core/timeline.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/format.h"

namespace kolo::core {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

}  // namespace

Timeline::~Timeline() { stop(); }

Status Timeline::start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) std::fclose(file_);
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) {
    return InvalidArgument("timeline: cannot open '" + path + "' for writing: " +
                           std::strerror(errno) + " (KOLO_TIMELINE / start_timeline)");
  }
  mark_cycles_ = mark_cycles;
  first_event_ = true;
  rows_.clear();
  origin_ = Clock::now();
  last_flush_ = origin_;
  std::fputs("[\n", file_);
  write_event(R"({"name":"process_name","ph":"M","pid":0,"args":{"name":"kolo rank 0"}})");
  std::fflush(file_);
  return Status::OK();
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

bool Timeline::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return file_ != nullptr;
}

void Timeline::write_event(const std::string& json) {
  if (!first_event_) std::fputs(",\n", file_);
  first_event_ = false;
  std::fputs(json.c_str(), file_);
}

int Timeline::row(const std::string& name) {
  auto it = rows_.find(name);
  if (it != rows_.end()) return it->second;
  const int id = static_cast<int>(rows_.size()) + 1;  // row 0: cycle markers
  rows_.emplace(name, id);
  write_event(R"({"name":"thread_name","ph":"M","pid":0,"tid":)" + std::to_string(id) +
              R"(,"args":{"name":)" + json_quoted(name) + "}}");
  return id;
}

void Timeline::record(const std::string& name, const char* op, std::int64_t bytes,
                      const Phases& p) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  const int tid = row(name);
  const std::string args =
      R"(,"args":{"op":")" + std::string(op) + R"(","bytes":)" + std::to_string(bytes) + "}}";
  struct Span {
    const char* phase;
    Clock::time_point from, to;
  };
  const Span spans[] = {{"negotiate", p.enqueued, p.first_cycle_end},
                        {"wait_for_ranks", p.first_cycle_end, p.response},
                        {"pack", p.pack_start, p.comm_start},
                        {"communicate", p.comm_start, p.comm_end},
                        {"unpack", p.comm_end, p.unpack_end}};
  for (const auto& s : spans) {
    // A request enqueued before start_timeline() starts at the file's origin.
    const auto from = std::max(s.from, origin_);
    const double dur = std::max(0.0, us(s.to) - us(from));
    write_event(R"({"name":")" + std::string(s.phase) + R"(","ph":"X","pid":0,"tid":)" +
                std::to_string(tid) + R"(,"ts":)" + number(us(from)) + R"(,"dur":)" + number(dur) +
                args);
  }
  // Flush now and then, not per event: a step records hundreds of tensors.
  const auto now = Clock::now();
  if (now - last_flush_ > std::chrono::milliseconds(100)) {
    std::fflush(file_);
    last_flush_ = now;
  }
}

void Timeline::mark_cycle(Clock::time_point start, std::size_t responses) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_ || !mark_cycles_) return;
  write_event(R"({"name":"cycle","ph":"i","s":"p","pid":0,"tid":0,"ts":)" + number(us(start)) +
              R"(,"args":{"responses":)" + std::to_string(responses) + "}}");
}

}  // namespace kolo::core
