// DevicePath: the data path of responses whose tensors are device memory (CUDA tensors
// passed as they are, not staged on the host): the device layer's collectives (NCCL on a
// GPU, the host stand-in in the CPU tests) instead of the CPU transport, with the same
// tensor semantics as the executor's (executor.h): fusion into one device buffer, prescale
// and compression while packing, averaging (by the number of ranks, joined ones included)
// and postscale while unpacking, the op's identity for a rank that joined; allgather,
// alltoall and reducescatter write their results into memory of the caller's
// OutputAllocator (kolo/types.h).
//
// The control plane stays on the CPU transport: negotiation chose the response; the
// set's CPU communicator also carries the device communicator's UniqueId the first time
// (device::connect_collectives). One DevicePath per process set, used by the background
// thread only.
//
// Streams (CUDA's semantics, no host synchronisation on the way): the group's work is
// enqueued on the path's stream after each input's ready event (TensorView::ready_event,
// recorded by the caller after the work that produces it), and an event recorded after it
// (the group's `done`) goes to every handle (Handle::device_event) when the work has been
// enqueued; the caller's stream waits on it before it reads the outputs. The handles then
// complete at once; the path keeps their state (and so the caller's memory, through
// keep_alive) until `done` has completed, which poll() checks every cycle: an error of the
// device work, or work not finished within the peer timeout, aborts the device
// communicator and ends the runtime as a peer failure does.
//
// Not for: host memory (executor.h), choosing which responses come here (runtime_loop.cc).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/executor.h"
#include "device/device.h"

namespace kolo::core {

// Whether `r` runs on the device path of a runtime that has one: device tensors (CUDA)
// of an allreduce, broadcast, allgather, alltoall or reducescatter. The same answer on
// every rank (the response's).
bool runs_on_device(const Response& r);

class DevicePath {
 public:
  // `index`: the device's CUDA ordinal (a tensor on another GPU is refused).
  // `options`: how the set's device collectives are made (device::connect_collectives).
  DevicePath(device::Device& device, int index, device::ConnectOptions options = {})
      : dev_(device), index_(index), options_(std::move(options)) {}
  // Waits (bounded) for the work still enqueued before anything it uses is freed.
  ~DevicePath();
  DevicePath(const DevicePath&) = delete;
  DevicePath& operator=(const DevicePath&) = delete;

  // Enqueues `items` (one broadcast, or allreduces of one fusion group) among the ranks of
  // `control` (the process set's CPU communicator). Like execute_fused(): the returned
  // status is the collective's (a failure applies to every item, and a peer failure
  // aborts the device communicator); `item_status` gets each item's own outcome. On
  // success *done is the event that marks the group's device work (for the handles);
  // the path keeps the items' handle states until it completes, `deadline` at the latest.
  // When an item fails, the host waits for the group's work before returning, so that a
  // failed handle never completes while the device still reads the caller's memory.
  Status execute(transport::Communicator& control, const std::vector<FusedItem>& items,
                 transport::Deadline deadline, std::vector<Status>* item_status, ExecTimes* times,
                 std::shared_ptr<device::Event>* done);

  // Releases what groups whose work completed held. An error of the device work, or a
  // group still running at its deadline, aborts the device communicator and is returned
  // (a peer failure: the runtime ends). Called by the background thread every cycle.
  Status poll();
  // The device's own handle of a group's event (Handle::device_event).
  void* native_event(device::Event& event) { return dev_.native_event(event); }
  // Whether groups are still running (the loop keeps cycling to poll them).
  bool busy() const { return !running_.empty(); }

 private:
  // A group whose device work was enqueued and has not been seen complete.
  struct Running {
    std::shared_ptr<device::Event> done;
    std::vector<std::shared_ptr<void>> held;  // handle states (the caller's memory), identity
    transport::Deadline deadline;
    std::string what;  // "allreduce 'x'" (and how many more), for the error
  };

  Status ready(transport::Communicator& control, transport::Deadline deadline);
  Status allreduce(const std::vector<FusedItem>& items, transport::Deadline deadline,
                   std::vector<Status>* item_status, ExecTimes* times,
                   std::vector<std::shared_ptr<void>>* held);
  Status broadcast(const Response& r, Entry& entry);
  // Allgather, alltoall, reducescatter: the result goes where the entry's allocator says
  // (*mine: why it could not, this rank's own failure).
  Status resized(const Response& r, Entry& entry, transport::Deadline deadline, Status* mine);
  Status output_of(Entry& entry, const Response& r, const Shape& shape, std::size_t bytes,
                   void** out) const;
  // Whether `entry`'s memory can take part here (device memory of this path's device);
  // if not, why.
  Status usable(const Entry& entry, const Response& r) const;
  // The stream waits for each input's ready event.
  Status wait_ready(const Entry& entry);
  // Aborts the communicator (NCCL's rule after a failed or unfinished collective), so that
  // nothing of it waits on; the next device response makes a new one.
  void abort();
  // The host waits for every running group until `deadline`.
  Status drain(transport::Deadline deadline);
  // The device fusion buffer of at least `bytes` bytes (buffer_).
  Status reserve(std::size_t bytes, transport::Deadline deadline);

  device::Device& dev_;
  const int index_;
  const device::ConnectOptions options_;
  std::unique_ptr<device::Stream> stream_;
  std::unique_ptr<device::Collectives> comm_;  // the set's, made at its first device response
  void* buffer_ = nullptr;                     // the device fusion buffer; grows
  std::size_t capacity_ = 0;
  std::deque<Running> running_;  // in the stream's order
};

}  // namespace kolo::core
