// Test helper: sets an environment variable for the life of the object (and unsets it
// after), e.g. to show that a layer ignores the process environment.
#pragma once

#include <cstdlib>

namespace kolo::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

}  // namespace kolo::testing
