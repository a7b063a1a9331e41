// Line splitting, whole-line writes and kolorun's console (see lines.h).
#include "launcher/lines.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace kolo::launcher {
namespace {

// The end of `text` without its trailing "\r"s.
size_t without_returns(std::string_view text) {
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '\r') --end;
  return end;
}

}  // namespace

void LineSplitter::emit(std::string_view line, const Sink& sink) const {
  if (returns_ == Returns::kLastUpdate) {
    line = line.substr(0, without_returns(line));
    if (const size_t cr = line.rfind('\r'); cr != std::string_view::npos) {
      line.remove_prefix(cr + 1);
    }
  }
  sink(line);
}

void LineSplitter::feed(const char* data, size_t n, const Sink& sink, const Sink& redraw) {
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') continue;
    if (pending_.empty()) {
      emit(std::string_view(data + start, i - start), sink);
    } else {
      pending_.append(data + start, i - start);
      emit(pending_, sink);
      pending_.clear();
    }
    shown_.clear();
    start = i + 1;
  }
  pending_.append(data + start, n - start);
  if (returns_ == Returns::kLastUpdate && !pending_.empty()) {
    // Drop the updates before the last "\r" that has text after it (a trailing "\r" may
    // be the first half of "\r\n"); the "\r" itself stays, as the sign of a redraw.
    const size_t end = without_returns(pending_);
    const size_t cr = end == 0 ? std::string::npos : pending_.rfind('\r', end - 1);
    if (cr != std::string::npos) {
      pending_.erase(0, cr);
      const std::string_view now = std::string_view(pending_).substr(1, end - cr - 1);
      if (redraw && !now.empty() && now != shown_) {
        shown_.assign(now);
        redraw(now);
      }
    }
  }
  while (pending_.size() >= kMaxLine) {
    emit(std::string_view(pending_).substr(0, kMaxLine), sink);
    pending_.erase(0, kMaxLine);
    shown_.clear();
  }
}

void LineSplitter::flush(const Sink& sink) {
  if (pending_.empty()) return;
  // A lone "\r" left at the end (after a redraw) is no line.
  if (returns_ == Returns::kKeep || without_returns(pending_) > 0) emit(pending_, sink);
  pending_.clear();
  shown_.clear();
}

void OutputReader::add_to(std::vector<struct pollfd>* fds) const {
  for (int fd : fds_) {
    if (fd >= 0) fds->push_back({fd, POLLIN, 0});
  }
}

void OutputReader::service(const std::vector<struct pollfd>& fds, const LineSplitter::Sink& on_out,
                           const LineSplitter::Sink& on_err,
                           const LineSplitter::Sink& on_out_redraw,
                           const LineSplitter::Sink& on_err_redraw) {
  char buf[16384];
  for (const auto& p : fds) {
    if (p.revents == 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds_[i] < 0 || p.fd != fds_[i]) continue;
      const ssize_t n = ::read(fds_[i], buf, sizeof(buf));
      if (n > 0) {
        split_[i].feed(buf, static_cast<size_t>(n), i == 0 ? on_out : on_err,
                       i == 0 ? on_out_redraw : on_err_redraw);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        split_[i].flush(i == 0 ? on_out : on_err);
        ::close(fds_[i]);
        fds_[i] = -1;
      }
    }
  }
}

void OutputReader::finish(const LineSplitter::Sink& on_out, const LineSplitter::Sink& on_err) {
  split_[0].flush(on_out);
  split_[1].flush(on_err);
  close();
}

void OutputReader::close() {
  for (int& fd : fds_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

Console::Console(bool terminal, Writer write) : terminal_(terminal), write_(std::move(write)) {}

void Console::out(int fd, std::string_view bytes) const {
  if (write_) {
    write_(fd, bytes);
  } else {
    write_all(fd, bytes);
  }
}

void Console::line(int fd, int source, std::string_view text) {
  std::string bytes;
  bytes.reserve(text.size() + 8);
  if (open_fd_ >= 0 && open_fd_ == fd && open_source_ == source) {
    bytes += '\r';  // the redrawn line's final text, in its place
    bytes.append(text);
    bytes += "\x1b[K";
  } else {
    finish();
    bytes.append(text);
  }
  bytes += '\n';
  open_fd_ = -1;
  out(fd, bytes);
}

void Console::redraw(int fd, int source, std::string_view text) {
  if (!terminal_) return;
  if (open_fd_ >= 0 && (open_fd_ != fd || open_source_ != source)) finish();
  std::string bytes;
  bytes.reserve(text.size() + 4);
  bytes += '\r';
  bytes.append(text);
  bytes += "\x1b[K";
  open_fd_ = fd;
  open_source_ = source;
  out(fd, bytes);
}

void Console::message(int fd, std::string_view text) {
  finish();
  out(fd, text);
}

void Console::finish() {
  if (open_fd_ < 0) return;
  const int fd = open_fd_;
  open_fd_ = -1;
  out(fd, "\n");
}

}  // namespace kolo::launcher
