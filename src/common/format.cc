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

std::string json_quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace kolo
