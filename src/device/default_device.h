// The device kolo::init() gives the default runtime (core::Runtime::set_device_factory):
// with KOLO_DEVICE_PATH (cmake/cuda.cmake) the CUDA device (cuda/cuda_entry.cc), so that
// CUDA tensors run through NCCL as they are; otherwise none (no_device_entry.cc), and the
// adapters stage CUDA tensors through host memory. CMake links one of the two; no #ifdef.
//
// Not for: the tests' devices (testing/test_devices.h), choosing a path per response
// (core/device_path.h).
#pragma once

#include <memory>

#include "common/status.h"
#include "device/device.h"

namespace kolo::device {

struct DefaultDeviceOptions {
  // The CUDA ordinal of the tensors that need the device; -1: local_rank modulo the GPUs
  // this process sees (kolo::device()'s choice).
  int index = -1;
  int local_rank = 0;
  // The bound of the device's waits for its collectives (KOLO_PEER_TIMEOUT_SECONDS).
  double timeout_seconds = 60;
};

// The kind of device this build gives the runtime ("cuda"), or nullptr when none.
const char* default_device_kind();

// Makes it: kUnsupported naming why when this process cannot have it (no GPU, no such
// ordinal), or when the build has none.
Status make_default_device(const DefaultDeviceOptions& options, std::unique_ptr<Device>* out);

}  // namespace kolo::device
