// The host stand-in's streams and events (host_device.h): a stream is a thread that runs
// its queue in order; an event's record() is a marker that the stream completes when it
// reaches it. Shared by host_device.cc and host_collectives.cc.
//
// Errors are sticky per stream, as CUDA's: once a task fails, the stream's later work is
// skipped and every marker after it completes with that error, so a wait on it never
// hangs and always learns why.
#pragma once

#include <condition_variable>
#include <cstdint>
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

// The state of a shared event (Device::create_shared_event) in a small shared-memory
// segment that the owner and every process that opened it map: the owner counts its
// record() calls (`recorded`, when called) and its stream stores each record's number in
// `completed` when it reaches it (in order), or marks the stream's failure. A wait in
// another process takes `recorded` as it is when called and waits until `completed`
// reaches it, as a CUDA stream waits for the last record of an interprocess event.
struct SharedEventState {
  std::uint64_t recorded;   // atomic_ref: record() calls so far (owner)
  std::uint64_t completed;  // atomic_ref: the last record its stream reached
  std::uint32_t failed;     // atomic_ref: 1 once `error` holds the stream's failure
  char error[1020];
};

// One mapping of a shared segment (memory or an event's state), unmapped at destruction;
// the owner's also removes its name if unpublish() has not.
class SharedMapping {
 public:
  // Creates "/kolo-dev-<pid>-<random>" of `bytes` bytes (0600, reserved up front, so a
  // full /dev/shm is an error here and not a SIGBUS later) and describes it in *handle.
  static Status create(std::size_t bytes, std::unique_ptr<SharedMapping>* out, IpcHandle* handle);
  static Status open(const IpcHandle& handle, std::unique_ptr<SharedMapping>* out);
  // The name in a handle ("" when it holds none).
  static std::string name_of(const IpcHandle& handle);
  ~SharedMapping();
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  // Removes the name now (the owner, once every process opened it). Idempotent.
  void unlink();

 private:
  std::string name_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool owner_ = false;
  bool linked_ = false;
};

class HostEvent : public Event {
 public:
  HostEvent() = default;
  // A shared event: its owner's (record() allowed) or one opened from a handle.
  HostEvent(std::shared_ptr<SharedMapping> shared, bool owner)
      : shared_(std::move(shared)), owner_(owner) {}
  std::shared_ptr<Marker> latest() const;
  void set_latest(std::shared_ptr<Marker> marker);
  // Null for an event of this process only.
  SharedEventState* shared() const {
    return shared_ ? static_cast<SharedEventState*>(shared_->data()) : nullptr;
  }
  const std::shared_ptr<SharedMapping>& mapping() const { return shared_; }
  bool owner() const { return owner_; }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Marker> latest_ KOLO_GUARDED_BY(mu_);  // null: never recorded here
  std::shared_ptr<SharedMapping> shared_;                // held by queued work too
  bool owner_ = true;
};

}  // namespace kolo::device::host
