// Rank layout arithmetic for kolorun's worker shim (see layout.h).
#include "launcher/layout.h"

#include <cstdlib>
#include <sstream>

namespace kolo::launcher {

std::vector<int> fill_hosts(const std::vector<HostSlots>& hosts, int np) {
  if (hosts.empty()) return {np};
  std::vector<int> layout;
  int left = np;
  for (const auto& h : hosts) {
    if (left <= 0) break;
    const int n = h.slots < left ? h.slots : left;
    layout.push_back(n);
    left -= n;
  }
  return layout;
}

Status compute_ranks(const std::vector<int>& layout, int rank, WorkerRanks* out) {
  if (layout.empty()) return InvalidArgument("empty layout");
  long size = 0;
  for (int c : layout) {
    if (c < 1)
      return InvalidArgument("layout '" + format_layout(layout) + "' has a host with no workers");
    size += c;
  }
  if (rank < 0 || rank >= size) {
    return InvalidArgument("rank " + std::to_string(rank) + " is outside layout '" +
                           format_layout(layout) + "' of " + std::to_string(size) + " workers");
  }
  WorkerRanks r;
  r.rank = rank;
  r.size = static_cast<int>(size);
  int first = 0;  // first rank on the current host
  size_t host = 0;
  while (rank >= first + layout[host]) first += layout[host++];
  r.local_rank = rank - first;
  r.local_size = layout[host];
  // Workers with the same local rank form one "cross" group, one per host that is big
  // enough; their order is host order.
  r.cross_rank = 0;
  r.cross_size = 0;
  for (size_t h = 0; h < layout.size(); ++h) {
    if (layout[h] > r.local_rank) {
      if (h < host) ++r.cross_rank;
      ++r.cross_size;
    }
  }
  *out = r;
  return Status::OK();
}

std::string format_layout(const std::vector<int>& layout) {
  std::string s;
  for (int c : layout) {
    if (!s.empty()) s += ',';
    s += std::to_string(c);
  }
  return s;
}

Status parse_layout(const std::string& text, std::vector<int>* out) {
  std::vector<int> layout;
  std::stringstream ss(text);
  std::string entry;
  while (std::getline(ss, entry, ',')) {
    char* end = nullptr;
    const long v = std::strtol(entry.c_str(), &end, 10);
    if (entry.empty() || *end != '\0' || v < 1 || v > (1 << 20)) {
      return InvalidArgument(std::string(kHostSlotsVar) + "='" + text +
                             "' is not a list of worker counts like 2,2");
    }
    layout.push_back(static_cast<int>(v));
  }
  if (layout.empty() || text.back() == ',') {
    return InvalidArgument(std::string(kHostSlotsVar) + "='" + text +
                           "' is not a list of worker counts like 2,2");
  }
  *out = std::move(layout);
  return Status::OK();
}

}  // namespace kolo::launcher
