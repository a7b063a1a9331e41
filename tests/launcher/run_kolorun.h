// RunKolorun: starts the real kolorun binary for the multi-process tests and collects its
// exit status and its stdout and stderr (kept apart), never waiting without a bound.
//
// Not for: unit tests of kolorun's parts (src/launcher/*_test.cc).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace kolo::launcher::testing {

struct RunResult {
  int status = -1;         // shell-style: exit code, or 128 + signal
  bool timed_out = false;  // killed by the test after its time limit
  double seconds = 0;      // from start to exit
  std::string out, err;
};

class KolorunProcess {
 public:
  // Starts `kolorun args...` in its own process group with stdout and stderr going to
  // temporary files; `env` entries are added to (or, with an empty value, removed from)
  // the test's environment.
  explicit KolorunProcess(const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& env = {});
  ~KolorunProcess();

  pid_t pid() const { return pid_; }
  // Current contents of the captured stdout.
  std::string out() const;
  // Waits until stdout has `count` lines containing `text`, up to `timeout_s`.
  bool wait_for_lines(const std::string& text, int count, double timeout_s) const;
  // Waits for exit up to `timeout_s`; past it, SIGKILLs the process group and records
  // timed_out.
  RunResult wait(double timeout_s);

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
  double started_ = 0;
  bool waited_ = false;
};

// Runs kolorun to completion (at most `timeout_s`).
RunResult run_kolorun(const std::vector<std::string>& args, double timeout_s = 30,
                      const std::map<std::string, std::string>& env = {});

// Lines of `text` (without newlines).
std::vector<std::string> lines_of(const std::string& text);

}  // namespace kolo::launcher::testing
