// DevicePath: the data path of responses whose tensors are device memory (CUDA tensors
// passed as they are, not staged on the host): the device layer's collectives (NCCL on a
// GPU, the host stand-in in the CPU tests) instead of the CPU transport, with the same
// tensor semantics as the executor's (executor.h): fusion into one device buffer, prescale
// and compression while packing, averaging (by the number of ranks, joined ones included)
// and postscale while unpacking, the op's identity for a rank that joined.
//
// The control plane stays on the CPU transport: negotiation chose the response; the
// set's CPU communicator also carries the device communicator's UniqueId the first time
// (device::connect_collectives). One DevicePath per process set, used by the background
// thread only.
//
// Today the background thread waits (bounded by the peer timeout) for the device work of
// each group before completing its handles; the caller's tensors must be ready on the
// device when it submits them. Ordering with the caller's CUDA streams through events is
// the next step (docs/gpu.md).
//
// Not for: host memory (executor.h), choosing which responses come here (runtime_loop.cc).
#pragma once

#include <memory>
#include <vector>

#include "core/executor.h"
#include "device/device.h"

namespace kolo::core {

// Whether `r` runs on the device path of a runtime that has one: device tensors (CUDA)
// of an allreduce or broadcast. The same answer on every rank (the response's).
bool runs_on_device(const Response& r);

class DevicePath {
 public:
  explicit DevicePath(device::Device& device) : dev_(device) {}
  ~DevicePath();
  DevicePath(const DevicePath&) = delete;
  DevicePath& operator=(const DevicePath&) = delete;

  // Runs `items` (one broadcast, or allreduces of one fusion group) among the ranks of
  // `control` (the process set's CPU communicator). Like execute_fused(): the returned
  // status is the collective's (a failure applies to every item, and a peer failure
  // aborts the device communicator); `item_status` gets each item's own outcome.
  Status execute(transport::Communicator& control, const std::vector<FusedItem>& items,
                 transport::Deadline deadline, std::vector<Status>* item_status, ExecTimes* times);

 private:
  Status ready(transport::Communicator& control, transport::Deadline deadline);
  Status allreduce(const std::vector<FusedItem>& items, std::vector<Status>* item_status,
                   ExecTimes* times);
  Status broadcast(const FusedItem& item);
  // Waits for the stream's work so far; a failure aborts the communicator.
  Status finish(transport::Deadline deadline);
  // The device fusion buffer of at least `bytes` bytes (buffer_).
  Status reserve(std::size_t bytes);

  device::Device& dev_;
  std::unique_ptr<device::Stream> stream_;
  std::unique_ptr<device::Event> done_;
  std::unique_ptr<device::Collectives> comm_;  // the set's, made at its first device response
  void* buffer_ = nullptr;                     // the device fusion buffer; grows
  std::size_t capacity_ = 0;
  std::vector<unsigned char> identity_;  // a joined rank's contribution, copied in from here
};

}  // namespace kolo::core
