// Small text helpers for messages, shared by every layer.
//
// Not for: logging (logging.h) or the public shape_string (kolo/types.h).
#pragma once

#include <string>
#include <vector>

namespace kolo {

// A double as in "%g": 600 -> "600", 0.5 -> "0.5", 1e10 -> "1e+10".
std::string number_string(double v);

// The one form of a list of ranks in messages: "rank 3", "ranks 0, 2, 5"; past 16 ranks
// "ranks 0, 1, ..., 15, ... (40 ranks)".
std::string ranks_string(const std::vector<int>& ranks);

// A JSON string literal of `s`: quotes and backslashes escaped, control bytes as \u00XX
// (user text: tensor names, addresses).
std::string json_quoted(const std::string& s);

}  // namespace kolo
