// The real device (device.h) on one CUDA GPU: the CUDA runtime for memory, streams and
// events, kolo's kernels (kernels.h) and NCCL (nccl_collectives.cc). Built with KOLO_CUDA.
//
// Every call sets the GPU as the calling thread's current device first (the runtime's
// current device is per thread). Host waits poll the event (cudaEventQuery) until their
// deadline instead of cudaEventSynchronize, which has no bound.
//
// Not for: the stand-in (host/), the runtime's choice of data path.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "device/device.h"

namespace kolo::device::cuda {

struct CudaDeviceOptions {
  int index = 0;  // the CUDA ordinal
  // The bound of the waits for NCCL's non-blocking initialisation and finalisation
  // (KOLO_PEER_TIMEOUT_SECONDS's role).
  double timeout_seconds = 60;
};

// kUnsupported naming the reason when this process sees no such GPU.
Status make_cuda_device(const CudaDeviceOptions& options, std::unique_ptr<Device>* out);

// A Stream that is a view of a stream the caller owns (a framework's current stream), so
// that kolo's work is ordered with the caller's through events. Not destroyed with it.
std::unique_ptr<Stream> stream_view(cudaStream_t stream);
// The CUDA stream behind a Stream made by a CUDA device or stream_view().
cudaStream_t native_stream(Stream& stream);

// Internal: a device's collectives (nccl_collectives.cc).
Status make_nccl_collectives(int device, const UniqueId& id, int rank, int size,
                             double timeout_seconds, Deadline deadline,
                             std::unique_ptr<Collectives>* out);
Status nccl_unique_id(UniqueId* out);

}  // namespace kolo::device::cuda
