#include "common/format.h"

#include <cstdio>

namespace kolo {

std::string number_string(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string ranks_string(const std::vector<int>& ranks) {
  constexpr std::size_t kShown = 16;
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  if (ranks.size() > kShown) out += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return out;
}

}  // namespace kolo
