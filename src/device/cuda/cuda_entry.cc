// default_device.h with KOLO_DEVICE_PATH: the CUDA device (cuda_device.h) on the GPU of
// the tensors that need it, or on local_rank's GPU.
#include <cuda_runtime.h>

#include "device/cuda/cuda_device.h"
#include "device/default_device.h"

namespace kolo::device {

const char* default_device_kind() { return "cuda"; }

Status make_default_device(const DefaultDeviceOptions& options, std::unique_ptr<Device>* out) {
  cuda::CudaDeviceOptions o;
  o.timeout_seconds = options.timeout_seconds;
  o.index = options.index;
  if (o.index < 0) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      return Status(ErrorCode::kUnsupported,
                    std::string("no CUDA device: ") +
                        (e != cudaSuccess ? cudaGetErrorString(e) : "this process sees none"));
    }
    o.index = options.local_rank % count;
  }
  return cuda::make_cuda_device(o, out);
}

}  // namespace kolo::device
