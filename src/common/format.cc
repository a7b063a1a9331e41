#include "common/format.h"

#include <cstdio>

namespace kolo {

std::string number_string(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace kolo
