// The host stand-in's streams and events (host_device.h): a stream is a thread that runs
// its queue in order; an event's record() is a marker that the stream completes when it
// reaches it. Shared by host_device.cc and host_collectives.cc.
//
// Errors are sticky per stream, as CUDA's: once a task fails, the stream's later work is
// skipped and every marker after it completes with that error, so a wait on it never
// hangs and always learns why.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/deadline.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "device/device.h"

namespace kolo::device::host {

// One record() of an event: complete once the stream ran everything before it.
class Marker {
 public:
  void complete(const Status& status);
  bool done() const;
  // OK or the stream's error once complete; kPeerFailure (naming `what`) at the deadline.
  Status wait_until(Deadline deadline, const std::string& what) const;
  Status status() const;  // once done()

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ KOLO_GUARDED_BY(mu_) = false;
  Status status_ KOLO_GUARDED_BY(mu_);
};

class HostStream : public Stream {
 public:
  // A task gets the stream's sticky status (OK until a task fails) and may change it.
  using Task = std::function<void(Status& sticky)>;
  explicit HostStream(std::string name);
  // Runs what is queued (each wait in it is bounded), then ends the thread.
  ~HostStream() override;
  const std::string& name() const { return name_; }
  void enqueue(Task task);
  // Work: runs only while the stream has no error; its failure becomes the stream's.
  void enqueue_work(std::function<Status()> work);

 private:
  void run();
  const std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_ KOLO_GUARDED_BY(mu_);
  bool stopping_ KOLO_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest exists
};

class HostEvent : public Event {
 public:
  std::shared_ptr<Marker> latest() const;
  void set_latest(std::shared_ptr<Marker> marker);

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Marker> latest_ KOLO_GUARDED_BY(mu_);  // null: never recorded
};

}  // namespace kolo::device::host
