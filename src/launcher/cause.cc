// Choosing the worker that ended the job (see cause.h).
#include "launcher/cause.h"

#include <cstdio>
#include <string>

namespace kolo::launcher {

int cause_weight(const WorkerExit& e) {
  if (!e.failed() || e.stop == Stop::kByJob) return 0;
  if (e.signal != 0 || e.stop == Stop::kFromOutside || e.shim_lost) return 2;
  return 1;
}

std::optional<WorkerExit> choose_cause(const std::vector<WorkerExit>& in_arrival_order) {
  const WorkerExit* best = nullptr;
  for (const WorkerExit& e : in_arrival_order) {
    const int w = cause_weight(e);
    if (w == 0) continue;
    if (best == nullptr || w > cause_weight(*best)) {
      best = &e;
    } else if (w == cause_weight(*best) && e.time_us > 0 && best->time_us > 0 &&
               e.time_us < best->time_us) {
      best = &e;
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

std::vector<WorkerExit> without_consequences(const std::vector<WorkerExit>& candidates,
                                             const std::map<int, std::vector<int>>& after) {
  const auto failed = [&](int rank) {
    for (const WorkerExit& e : candidates) {
      if (e.rank == rank && cause_weight(e) > 0) return true;
    }
    return false;
  };
  std::vector<WorkerExit> kept;
  for (const WorkerExit& e : candidates) {
    const auto it = after.find(e.rank);
    bool consequence = false;
    if (it != after.end()) {
      for (int r : it->second) consequence = consequence || (r != e.rank && failed(r));
    }
    if (!consequence) kept.push_back(e);
  }
  return kept.empty() ? candidates : kept;
}

void MpirunMessages::feed(std::string_view view) {
  const std::string line(view);
  if (line.find("the job has been aborted") != std::string::npos ||
      line.find("detected that one or more processes exited with non-zero status") !=
          std::string::npos) {
    aborting_ = true;
  }
  if (const size_t at = line.find("noticed that process rank "); at != std::string::npos) {
    aborting_ = true;
    WorkerExit e;
    char host[256] = {};
    long pid = 0;
    if (std::sscanf(line.c_str() + at,
                    "noticed that process rank %d with PID %ld on node %255s "
                    "exited on signal %d",
                    &e.rank, &pid, host, &e.signal) == 4 &&
        e.signal > 0) {
      e.host = host;
      e.shim_lost = true;
      named_.push_back(e);
    }
    return;
  }
  if (const size_t at = line.find("Process name: [["); at != std::string::npos) {
    int family = 0, job = 0, rank = -1;
    pending_rank_ =
        std::sscanf(line.c_str() + at, "Process name: [[%d,%d],%d]", &family, &job, &rank) == 3
            ? rank
            : -1;
    return;
  }
  if (const size_t at = line.find("Exit code:"); at != std::string::npos && pending_rank_ >= 0) {
    WorkerExit e;
    e.rank = pending_rank_;
    pending_rank_ = -1;
    if (std::sscanf(line.c_str() + at, "Exit code: %d", &e.exit_code) == 1 && e.exit_code != 0) {
      e.shim_lost = true;
      named_.push_back(e);
    }
  }
}

std::vector<WorkerExit> MpirunMessages::take_named() {
  std::vector<WorkerExit> out;
  out.swap(named_);
  return out;
}

}  // namespace kolo::launcher
