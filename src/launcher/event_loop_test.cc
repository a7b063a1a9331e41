// Tests for one step of a launcher loop: the earliest deadline, descriptors reported in the
// order they were added, signals through the signal pipe, and the bound of every wait, with
// or without a deadline and whatever signals interrupt it (event_loop.h).
#include "launcher/event_loop.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kolo::launcher {
namespace {

using std::chrono::milliseconds;

// A pipe whose ends close with the test.
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0); }
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  int read_end() const { return fds[0]; }
  void write(const std::string& s) {
    ASSERT_EQ(::write(fds[1], s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  void close_write_end() { ::close(fds[1]), fds[1] = -1; }
};

milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// Whether `deadline` has passed, but for poll_timeout_ms's rounding: it waits 0 ms once
// less than a millisecond is left.
bool reached(Deadline deadline) { return Clock::now() > deadline - milliseconds(1); }

TEST(Deadlines, TheEarliestOfThoseSetAndActive) {
  const Deadline now = Clock::now();
  Deadlines none;
  none.consider(std::nullopt);
  none.consider(now, /*active=*/false);
  EXPECT_FALSE(none.earliest().has_value());

  Deadlines d;
  d.consider(now + milliseconds(30));
  d.consider(now + milliseconds(10), /*active=*/false);  // a deadline that no longer matters
  d.consider(std::nullopt);
  d.consider(now + milliseconds(20));
  d.consider(now + milliseconds(40));
  ASSERT_TRUE(d.earliest().has_value());
  EXPECT_EQ(*d.earliest(), now + milliseconds(20));
}

TEST(PollSet, RunsTheHandlersOfReadyDescriptorsInTheOrderAdded) {
  Pipe a, b, idle;
  std::vector<std::string> ran;
  PollSet step;
  step.add(b.read_end(), [&] { ran.push_back("b"); });
  step.add(idle.read_end(), [&] { ran.push_back("idle"); });
  step.add(a.read_end(), [&] { ran.push_back("a"); });
  a.write("x");
  b.write("y");
  const auto start = Clock::now();
  ASSERT_TRUE(step.wait(Clock::now() + std::chrono::seconds(5)).ok());
  EXPECT_LT(since(start), milliseconds(2000));  // ready at once, not at the deadline
  EXPECT_EQ(ran, (std::vector<std::string>{"b", "a"}));
}

TEST(PollSet, ReportsAHungUpPipe) {
  Pipe p;
  bool ran = false;
  PollSet step;
  step.add(p.read_end(), [&] { ran = true; });
  p.close_write_end();
  ASSERT_TRUE(step.wait(Clock::now() + std::chrono::seconds(5)).ok());
  EXPECT_TRUE(ran);
  char c;
  EXPECT_EQ(::read(p.read_end(), &c, 1), 0);  // the handler's read tells: end of file
}

TEST(PollSet, PassesAnOutputReadersLinesToItsSinks) {
  Pipe out, err;
  // The reader owns (and closes) the read ends.
  OutputReader output(::dup(out.read_end()), ::dup(err.read_end()));
  std::vector<std::string> lines;
  out.write("one\ntw");
  err.write("e\n");
  PollSet step;
  step.add(
      &output, [&](std::string_view l) { lines.push_back("out " + std::string(l)); },
      [&](std::string_view l) { lines.push_back("err " + std::string(l)); });
  ASSERT_TRUE(step.wait(Clock::now() + std::chrono::seconds(5)).ok());
  // One wait reads what each ready pipe holds; both were ready.
  EXPECT_EQ(lines, (std::vector<std::string>{"out one", "err e"}));
}

TEST(PollSet, WaitsUntilTheDeadlineWhenNothingIsReady) {
  Pipe idle;
  bool ran = false;
  PollSet step;
  step.add(idle.read_end(), [&] { ran = true; });
  const Deadline deadline = Clock::now() + milliseconds(50);
  ASSERT_TRUE(step.wait(deadline).ok());
  EXPECT_TRUE(reached(deadline));
  EXPECT_FALSE(ran);
}

// The bound of process.cc's poll_timeout_ms: a loop with no deadline still looks again
// within 100 ms (it reaps its children each time round).
TEST(PollSet, IsBoundedWithoutADeadline) {
  Pipe idle;
  PollSet step;
  step.add(idle.read_end(), [] {});
  const auto start = Clock::now();
  ASSERT_TRUE(step.wait(std::nullopt).ok());
  EXPECT_TRUE(reached(start + milliseconds(poll_timeout_ms(nullptr))));
  EXPECT_LT(since(start), milliseconds(2000));
}

std::atomic<int> g_interruptions{0};
void count_interruption(int) { g_interruptions.fetch_add(1); }

// Sends SIGUSR2 (handled without SA_RESTART, so that poll() fails with EINTR) to `thread`
// every `every` until stopped, for 2 s at most (so that a wait that signals kept going
// fails its test instead of hanging it).
class Interrupter {
 public:
  Interrupter(pthread_t thread, milliseconds every) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_interruption;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGUSR2, &sa, &old_);
    g_interruptions = 0;
    sender_ = std::thread([this, thread, every] {
      const auto end = Clock::now() + std::chrono::seconds(2);
      while (!stop_ && Clock::now() < end) {
        std::this_thread::sleep_for(every);
        if (!stop_) ::pthread_kill(thread, SIGUSR2);
      }
    });
  }
  ~Interrupter() {
    stop_ = true;
    sender_.join();
    ::sigaction(SIGUSR2, &old_, nullptr);
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread sender_;
  struct sigaction old_;
};

TEST(PollSet, ASignalDoesNotEndTheWaitBeforeItsDeadline) {
  Pipe idle;
  bool ran = false;
  PollSet step;
  step.add(idle.read_end(), [&] { ran = true; });
  const Deadline deadline = Clock::now() + milliseconds(300);
  {
    Interrupter signals(::pthread_self(), milliseconds(20));
    ASSERT_TRUE(step.wait(deadline).ok());
    EXPECT_TRUE(reached(deadline));
  }
  EXPECT_GT(g_interruptions.load(), 0);  // poll() was interrupted on the way
  EXPECT_FALSE(ran);
}

TEST(PollSet, SignalsDoNotExtendTheBoundWithoutADeadline) {
  Pipe idle;
  PollSet step;
  step.add(idle.read_end(), [] {});
  const auto start = Clock::now();
  {
    // More often than the 100 ms bound: a bound restarted after each EINTR would never end
    // while they come.
    Interrupter signals(::pthread_self(), milliseconds(20));
    ASSERT_TRUE(step.wait(std::nullopt).ok());
    EXPECT_LT(since(start), milliseconds(1000));
  }
  EXPECT_GT(g_interruptions.load(), 0);
}

// The signal pipe: each signal but SIGCHLD goes to the handler, with its number.
TEST(PollSet, PassesSignalsOnButSIGCHLD) {
  const int signal_fd = route_signals_to_pipe({SIGUSR1, SIGCHLD});
  ASSERT_GE(signal_fd, 0);
  std::vector<int> signals;
  PollSet step;
  step.add_signals(signal_fd, [&](const SignalEvent& e) { signals.push_back(e.signal); });
  ::raise(SIGCHLD);
  const auto start = Clock::now();
  ASSERT_TRUE(step.wait(start + std::chrono::seconds(5)).ok());
  EXPECT_LT(since(start), milliseconds(2000));  // SIGCHLD woke the step...
  EXPECT_TRUE(signals.empty());                 // ...and went no further
  ::raise(SIGUSR1);
  ASSERT_TRUE(step.wait(Clock::now() + std::chrono::seconds(5)).ok());
  EXPECT_EQ(signals, std::vector<int>{SIGUSR1});
  ::signal(SIGUSR1, SIG_DFL);
  ::signal(SIGCHLD, SIG_DFL);
  ::close(signal_fd);
}

}  // namespace
}  // namespace kolo::launcher
