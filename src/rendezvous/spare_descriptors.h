// Descriptors held in reserve for the moments a server has none left (the TCP store
// server's accept loop). Not for: anything that needs a descriptor to keep.
#pragma once

#include <fcntl.h>
#include <unistd.h>

namespace kolo::rendezvous {

// Descriptors held in reserve (/dev/null) for the moments this process has none left: the
// server lends them out while it handles an accept() that failed for want of descriptors
// (its log line, and the sanitizers' own checks, may need one) and while it reads the
// kernel's socket table for a connection it has just accepted with the last free one.
class SpareDescriptors {
 public:
  static constexpr int kCount = 2;
  SpareDescriptors() { take(); }
  ~SpareDescriptors() { give(); }
  SpareDescriptors(const SpareDescriptors&) = delete;
  SpareDescriptors& operator=(const SpareDescriptors&) = delete;

  // Closes the spares for the guard's lifetime, then opens them again (as many as it can:
  // another thread may have taken the freed numbers meanwhile; the rest are retried on the
  // next lending).
  class Lent {
   public:
    explicit Lent(SpareDescriptors& s) : s_(s) { s_.give(); }
    ~Lent() { s_.take(); }
    Lent(const Lent&) = delete;
    Lent& operator=(const Lent&) = delete;

   private:
    SpareDescriptors& s_;
  };

 private:
  void give() {
    for (int& fd : fds_) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }
  void take() {
    for (int& fd : fds_) {
      if (fd < 0) fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
  }
  int fds_[kCount] = {-1, -1};
};

}  // namespace kolo::rendezvous
