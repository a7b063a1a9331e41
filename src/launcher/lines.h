// Lines: reading a child's stdout and stderr pipes as whole lines, and writing them whole.
//
// Both the worker shim and the kolorun parent forward other processes' output line by
// line so that lines from different workers never interleave mid-line: each forwarded
// line goes out in a single write(). A line redrawn in place with "\r" (a progress bar:
// "\r 1/10 [...]", "\r 2/10 [...]", ..., "\r10/10 [...]\n") is passed on as its last
// update only; on a terminal its updates can also be shown as they come (Console).
// Not for: deciding what a line means (events.h).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "startup/config.h"

struct pollfd;

namespace kolo::launcher {

// KOLO_TERMINAL (startup/config.h): 1 when kolorun's stdout is a terminal.
inline constexpr const char* kTerminalVar = core::kTerminalVar;

// Whether output on `fd` ends up on a terminal: KOLO_TERMINAL=1 or 0 in `env` decides;
// unset (or anything else), isatty(fd).
inline bool is_terminal(const std::map<std::string, std::string>& env, int fd) {
  return core::output_is_terminal(env, fd);
}
// Whether kolorun said it is on a terminal (KOLO_TERMINAL=1): for the shims and remote
// wrappers, whose own stdout is no guide (under mpirun it is a pseudo-terminal of
// mpirun's, whatever kolorun's stdout is).
inline bool kolorun_on_terminal(const std::map<std::string, std::string>& env) {
  return is_terminal(env, -1);
}

class LineSplitter {
 public:
  // Called with each line, without its trailing newline.
  using Sink = std::function<void(std::string_view line)>;

  // A line longer than this is passed on in pieces of this size, so that a program
  // printing without newlines cannot make the forwarder buffer without bound.
  static constexpr size_t kMaxLine = 64 * 1024;

  // What becomes of a "\r" inside a line.
  enum class Returns {
    // A line is what a terminal would end up showing of it: the text after its last
    // "\r" ("\r\n" ends a line like "\n"). Earlier updates are dropped as they come, so
    // a bar redrawn for hours holds no more than its current text.
    kLastUpdate,
    // Lines are passed on as they are (kolorun's --mpi parent: the shims did the above).
    kKeep,
  };
  explicit LineSplitter(Returns returns = Returns::kLastUpdate) : returns_(returns) {}

  // Passes complete lines to `sink`. With kLastUpdate and a `redraw` sink, an unfinished
  // line that was redrawn ("...\rTEXT" at the end of `data`) is also passed to `redraw`
  // as TEXT after each feed that changed it: the update as a terminal shows it now.
  void feed(const char* data, size_t n, const Sink& sink, const Sink& redraw = nullptr);
  // Passes on a last line that had no newline (at end of stream).
  void flush(const Sink& sink);

 private:
  void emit(std::string_view line, const Sink& sink) const;

  Returns returns_;
  std::string pending_;
  std::string shown_;  // the last text passed to `redraw` for the pending line
};

// The two output pipes of one child, read without blocking the caller's loop (a PollSet,
// event_loop.h, watches them). How long they are read after the child exited:
// event_loop.h's drain times.
class OutputReader {
 public:
  OutputReader(int out_fd, int err_fd,
               LineSplitter::Returns returns = LineSplitter::Returns::kLastUpdate)
      : fds_{out_fd, err_fd}, split_{LineSplitter(returns), LineSplitter(returns)} {}
  ~OutputReader() { close(); }
  OutputReader(const OutputReader&) = delete;
  OutputReader& operator=(const OutputReader&) = delete;

  // True while either pipe has not reached end of file.
  bool open() const { return fds_[0] >= 0 || fds_[1] >= 0; }
  // Appends the pipes still open to `fds` (for poll()).
  void add_to(std::vector<struct pollfd>* fds) const;
  // Reads what poll() reported ready in `fds`; complete lines go to the sinks, and
  // in-place updates (LineSplitter::feed) to the redraw sinks where given.
  void service(const std::vector<struct pollfd>& fds, const LineSplitter::Sink& on_out,
               const LineSplitter::Sink& on_err, const LineSplitter::Sink& on_out_redraw = nullptr,
               const LineSplitter::Sink& on_err_redraw = nullptr);
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

// kolorun's own stdout and stderr: whole lines from several sources (a worker's rank, or
// kolorun itself), one write() each, and on a terminal one line at a time that a source
// redraws in place: "\r" TEXT "\x1b[K" (erase the rest of the old text), no newline. Any
// other output ends that line with "\n" first, so that lines never run into it; the
// source's own next line replaces it ("\r" LINE "\x1b[K\n"). Not a terminal: redraws are
// dropped and only lines go out. A line wider than the terminal wraps, and "\r" then
// goes back only to the start of its last row (so does Keras's own bar). Owned by one
// thread.
class Console {
 public:
  using Writer = std::function<void(int fd, std::string_view bytes)>;
  static constexpr int kKolorun = -1;  // the source of kolorun's own messages

  // `write` defaults to write_all.
  explicit Console(bool terminal, Writer write = nullptr);
  bool terminal() const { return terminal_; }

  // TEXT "\n" on `fd`.
  void line(int fd, int source, std::string_view text);
  // On a terminal: shows TEXT in place of `source`'s previous update on `fd`.
  void redraw(int fd, int source, std::string_view text);
  // Whole lines (each ending in "\n") from kolorun itself.
  void message(int fd, std::string_view text);
  // Ends the line being redrawn, if any, with "\n".
  void finish();

 private:
  void out(int fd, std::string_view bytes) const;

  bool terminal_;
  Writer write_;
  int open_fd_ = -1;  // the fd of the line being redrawn; -1 none
  int open_source_ = 0;
};

}  // namespace kolo::launcher
