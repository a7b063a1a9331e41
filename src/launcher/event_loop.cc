// One step of a launcher loop (see event_loop.h).
#include "launcher/event_loop.h"

#include <poll.h>
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace kolo::launcher {

PollSet::PollSet() = default;
PollSet::~PollSet() = default;

void PollSet::add(int fd, std::function<void()> on_ready) {
  const size_t at = fds_.size();
  fds_.push_back({fd, POLLIN, 0});
  handlers_.push_back([at, on_ready = std::move(on_ready)](const std::vector<struct pollfd>& fds) {
    if (fds[at].revents != 0) on_ready();
  });
}

void PollSet::add(OutputReader* output, LineSplitter::Sink on_out, LineSplitter::Sink on_err,
                  LineSplitter::Sink on_out_redraw, LineSplitter::Sink on_err_redraw) {
  output->add_to(&fds_);
  handlers_.push_back([=](const std::vector<struct pollfd>& fds) {
    output->service(fds, on_out, on_err, on_out_redraw, on_err_redraw);
  });
}

void PollSet::add_signals(int signal_fd, std::function<void(const SignalEvent&)> on_signal) {
  add(signal_fd, [signal_fd, on_signal = std::move(on_signal)] {
    for (const SignalEvent& e : read_signal_events(signal_fd)) {
      if (e.signal != SIGCHLD) on_signal(e);
    }
  });
}

Status PollSet::wait(const std::optional<Deadline>& wake) {
  // Without a deadline the wait still ends within poll_timeout_ms's bound (process.cc says
  // why); after EINTR, poll() goes on for what is left of the same bound.
  const Deadline until =
      wake ? *wake : Clock::now() + std::chrono::milliseconds(poll_timeout_ms(nullptr));
  int ready;
  while ((ready = ::poll(fds_.data(), fds_.size(), poll_timeout_ms(&until))) < 0) {
    if (errno != EINTR) return Internal(std::string("poll: ") + std::strerror(errno));
  }
  if (ready == 0) return Status::OK();
  for (const auto& handler : handlers_) handler(fds_);
  return Status::OK();
}

}  // namespace kolo::launcher
