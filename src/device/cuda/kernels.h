// kolo's CUDA kernels for the device layer (kernels.cu): the fusion's pack/unpack with
// scaling and float16/bfloat16 compression, and elementwise reductions. The same values as
// the CPU kernels (common/convert.h, common/reduce.h) with one difference: integer scaling
// is computed in double (the CPU's long double is not on the GPU), so int64 values beyond
// 2^53 may round differently.
//
// Not for: choosing when to run them (cuda_device.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kolo/types.h"

namespace kolo::device::cuda {

// dst[i] = to(src[i] * factor / divisor): convert_scaled's pairs (the same dtype, or
// float32/float64 <-> float16/bfloat16). cudaErrorInvalidValue for another pair.
cudaError_t launch_convert(void* dst, DataType to, const void* src, DataType from,
                           std::size_t count, double factor, double divisor, cudaStream_t stream);

// dst[i] = op(dst[i], src[i]); `op` not kAverage; bool: sum/max are or, product/min and.
cudaError_t launch_reduce(void* dst, const void* src, std::size_t count, DataType dtype,
                          ReduceOp op, cudaStream_t stream);

}  // namespace kolo::device::cuda
