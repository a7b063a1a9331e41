// The devices the device layer's tests run on: the host stand-in always, and the CUDA
// device where kolo was built with KOLO_CUDA (test_devices_cuda.cc; test_devices_host.cc
// otherwise). A test parameterised over them runs the same checks on both.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "device/host/host_device.h"

namespace kolo::device::testing {

struct TestDevice {
  std::string kind;  // "host" or "cuda": the test's name
  // The most ranks a collectives test may run, as threads of one process (CUDA: 1, as
  // NCCL refuses two ranks on one GPU and the test machine has one).
  int max_ranks = 4;
  // Rank `rank`'s device (`connect`: the stand-in's network), or kUnsupported when this
  // machine has none (the test then skips, saying why).
  std::function<Status(int rank, double timeout_seconds, host::Connect connect,
                       std::unique_ptr<Device>* out)>
      make;
  // What connect_collectives() gets (the CUDA-IPC path's region size).
  ConnectOptions connect{};
  // Only even numbers of ranks (hosts of equal size for the hierarchical kind).
  bool even_ranks_only = false;
};

// Its kind, for GoogleTest's test names and messages.
inline void PrintTo(const TestDevice& d, std::ostream* os) { *os << d.kind; }

// The stand-in (test_devices.cc).
TestDevice host_test_device();
// Stand-ins that all play one GPU, so that connect_collectives() takes the CUDA-IPC path
// (with regions of 64-byte halves: most collectives go in several chunks).
TestDevice host_ipc_test_device();
// Stand-ins on two pretended hosts (rank r on host r % 2, so the hosts' ranks interleave),
// host-mates playing one GPU, with hierarchical collectives: the CUDA-IPC path inside each
// host and the stand-in's CPU transport across (even rank counts only).
TestDevice host_hier_test_device();
// Every kind this build has (test_list_host.cc or, with KOLO_CUDA, test_list_cuda.cc).
std::vector<TestDevice> test_devices();

}  // namespace kolo::device::testing
