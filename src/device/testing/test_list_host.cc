// test_devices() in a build without KOLO_CUDA: the stand-in only.
#include "device/testing/test_devices.h"

namespace kolo::device::testing {

std::vector<TestDevice> test_devices() {
  return {host_test_device(), host_ipc_test_device(), host_hier_test_device()};
}

}  // namespace kolo::device::testing
