// Small text helpers for messages, shared by every layer.
//
// Not for: logging (logging.h) or the public shape_string (kolo/types.h).
#pragma once

#include <string>

namespace kolo {

// A double as in "%g": 600 -> "600", 0.5 -> "0.5", 1e10 -> "1e+10".
std::string number_string(double v);

}  // namespace kolo
