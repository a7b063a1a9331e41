// Lines: reading a child's stdout and stderr pipes as whole lines, and writing them whole.
//
// Both the worker shim and the kolorun parent forward other processes' output line by
// line so that lines from different workers never interleave mid-line: each forwarded
// line goes out in a single write(). Not for: deciding what a line means (events.h).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

struct pollfd;

namespace kolo::launcher {

class LineSplitter {
 public:
  // Called with each line, without its trailing newline.
  using Sink = std::function<void(std::string_view line)>;

  // A line longer than this is passed on in pieces of this size, so that a program
  // printing without newlines cannot make the forwarder buffer without bound.
  static constexpr size_t kMaxLine = 64 * 1024;

  void feed(const char* data, size_t n, const Sink& sink);
  // Passes on a last line that had no newline (at end of stream).
  void flush(const Sink& sink);

 private:
  std::string pending_;
};

// The two output pipes of one child, read without blocking the caller's poll() loop.
class OutputReader {
 public:
  OutputReader(int out_fd, int err_fd) : fds_{out_fd, err_fd} {}
  ~OutputReader() { close(); }
  OutputReader(const OutputReader&) = delete;
  OutputReader& operator=(const OutputReader&) = delete;

  // True while either pipe has not reached end of file.
  bool open() const { return fds_[0] >= 0 || fds_[1] >= 0; }
  // Appends the pipes still open to `fds` (for poll()).
  void add_to(std::vector<struct pollfd>* fds) const;
  // Reads what poll() reported ready in `fds`; complete lines go to the sinks.
  void service(const std::vector<struct pollfd>& fds, const LineSplitter::Sink& on_out,
               const LineSplitter::Sink& on_err);
  // Closes both pipes and passes on last lines that had no newline.
  void finish(const LineSplitter::Sink& on_out, const LineSplitter::Sink& on_err);

 private:
  void close();

  int fds_[2];
  LineSplitter split_[2];
};

// Writes all of `data` to `fd`, retrying after EINTR and partial writes. Returns false on
// other errors (e.g. EPIPE when the reader is gone); the caller carries on regardless.
bool write_all(int fd, std::string_view data);

}  // namespace kolo::launcher
