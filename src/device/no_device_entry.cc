// default_device.h in a build without KOLO_DEVICE_PATH: no device; CUDA tensors are
// staged through host memory by the adapters.
#include "device/default_device.h"

namespace kolo::device {

const char* default_device_kind() { return nullptr; }

Status make_default_device(const DefaultDeviceOptions&, std::unique_ptr<Device>*) {
  return Status(ErrorCode::kUnsupported,
                "this kolo was built without KOLO_DEVICE_PATH, so it has no device path for "
                "CUDA tensors (rebuild with -DKOLO_CUDA=ON -DKOLO_DEVICE_PATH=ON)");
}

}  // namespace kolo::device
