// test_devices() in a build with KOLO_CUDA: the stand-in and GPU 0 (skipped where this
// machine has no GPU).
#include "device/cuda/cuda_device.h"
#include "device/testing/test_devices.h"

namespace kolo::device::testing {

std::vector<TestDevice> test_devices() {
  TestDevice cuda{.kind = "cuda",
                  .max_ranks = 1,
                  .make = [](int, double timeout, host::Connect, std::unique_ptr<Device>* out) {
                    return cuda::make_cuda_device({.index = 0, .timeout_seconds = timeout}, out);
                  }};
  return {host_test_device(), host_ipc_test_device(), host_hier_test_device(), cuda};
}

}  // namespace kolo::device::testing
