// What the libtorch adapter's worker programs (torch_worker.cc, habits_worker.cc) share:
// a check throws Failure with what went wrong, run() prints "<check> OK" or
// "<check> FAILED: why" and counts the failures.
#pragma once

#include <cstdio>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kolo/torch.h"

namespace kolo_test {

inline int g_failed = 0;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void expect(bool ok, const std::string& what) {
  if (!ok) throw Failure(what);
}

inline void expect_close(const torch::Tensor& a, const torch::Tensor& b, double rtol, double atol,
                         const std::string& what) {
  if (a.device() != b.device()) return expect_close(a.cpu(), b.cpu(), rtol, atol, what);
  if (!torch::allclose(a, b, rtol, atol)) {
    std::ostringstream o;
    o << what << ": max difference " << (a - b).abs().max().item<double>();
    throw Failure(o.str());
  }
}

// Runs f and expects it to throw an E whose message contains every one of `parts`.
template <typename E = kolo::Error, typename... Parts>
void expect_error(const std::function<void()>& f, const Parts&... parts) {
  const std::vector<std::string> wanted = {std::string(parts)...};
  try {
    f();
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& part : wanted) {
      expect(message.find(part) != std::string::npos, "error without '" + part + "': " + message);
    }
    return;
  }
  std::string all;
  for (const std::string& part : wanted) all += (all.empty() ? "'" : ", '") + part + "'";
  throw Failure("no error, expected one mentioning " + all);
}

inline void run(const char* name, void (*check)()) {
  try {
    check();
    std::printf("%s OK\n", name);
  } catch (const std::exception& e) {
    ++g_failed;
    std::printf("%s FAILED: %s\n", name, e.what());
  }
  std::fflush(stdout);
}

}  // namespace kolo_test
