// Helpers of the tests of kolorun's own launcher (own_launcher_test.cc,
// elastic_launcher_test.cc, ps_launcher_test.cc): text checks, whether a process runs, a scratch
// directory, and the stand-in ssh that plays other hosts.
//
// Not for: starting kolorun (run_kolorun.h).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace kolo::launcher::testing {

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Whether `pid` runs: gone, or a zombie that init has yet to reap, counts as dead.
inline bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  return (stat >> pid_field >> comm >> state) && state != "Z";
}

// Whether every one of `pids` is gone within `seconds` (polled every 20 ms).
inline bool gone_within(const std::vector<pid_t>& pids, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    bool any = false;
    for (pid_t p : pids) any = any || alive(p);
    if (!any) return true;
    ::usleep(20000);
  }
  return false;
}

// A temporary directory for one test, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    char path[] = "/tmp/kolorun_own_XXXXXX";
    if (::mkdtemp(path) != nullptr) path_ = path;
  }
  ~ScratchDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }
  void write(const std::string& name, const std::string& text, mode_t mode = 0644) const {
    std::ofstream(path_ + "/" + name) << text;
    ::chmod((path_ + "/" + name).c_str(), mode);
  }
  std::string read(const std::string& name) const {
    std::ifstream in(path_ + "/" + name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string path_;
};

// A stand-in ssh: skips its options up to "--", then the host, and runs the command.
inline std::map<std::string, std::string> fake_ssh_env(const ScratchDir& dir) {
  dir.write("ssh",
            "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nshift\nexec sh -c \"$1\"\n",
            0755);
  const char* path = std::getenv("PATH");
  return {{"PATH", dir.path() + ":" + (path ? path : "/usr/bin:/bin")}};
}

}  // namespace kolo::launcher::testing
