// Line splitting and whole-line writes (see lines.h).
#include "launcher/lines.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace kolo::launcher {

void LineSplitter::feed(const char* data, size_t n, const Sink& sink) {
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') continue;
    if (pending_.empty()) {
      sink(std::string_view(data + start, i - start));
    } else {
      pending_.append(data + start, i - start);
      sink(pending_);
      pending_.clear();
    }
    start = i + 1;
  }
  pending_.append(data + start, n - start);
  while (pending_.size() >= kMaxLine) {
    sink(std::string_view(pending_).substr(0, kMaxLine));
    pending_.erase(0, kMaxLine);
  }
}

void LineSplitter::flush(const Sink& sink) {
  if (pending_.empty()) return;
  sink(pending_);
  pending_.clear();
}

void OutputReader::add_to(std::vector<struct pollfd>* fds) const {
  for (int fd : fds_) {
    if (fd >= 0) fds->push_back({fd, POLLIN, 0});
  }
}

void OutputReader::service(const std::vector<struct pollfd>& fds, const LineSplitter::Sink& on_out,
                           const LineSplitter::Sink& on_err) {
  char buf[16384];
  for (const auto& p : fds) {
    if (p.revents == 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds_[i] < 0 || p.fd != fds_[i]) continue;
      const ssize_t n = ::read(fds_[i], buf, sizeof(buf));
      if (n > 0) {
        split_[i].feed(buf, static_cast<size_t>(n), i == 0 ? on_out : on_err);
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

}  // namespace kolo::launcher
