// kolo's CUDA kernels (kernels.h): grid-stride loops, one template per operation,
// float16/bfloat16 computed in float as the CPU kernels do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/cuda/kernels.h"

namespace kolo::device::cuda {
namespace {

constexpr int kThreads = 256;

// Blocks for n elements: enough to fill the GPU, never more than needed.
unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 4096 ? (b == 0 ? 1 : b) : 4096);
}

// Values as the kernels compute with them: float16/bfloat16 through float.
struct Half {
  static __device__ float load(const std::uint16_t* p, std::size_t i) {
    return __half2float(__ushort_as_half(p[i]));
  }
  static __device__ void store(std::uint16_t* p, std::size_t i, float v) {
    p[i] = __half_as_ushort(__float2half_rn(v));
  }
};
struct BFloat {
  static __device__ float load(const std::uint16_t* p, std::size_t i) {
    return __bfloat162float(__ushort_as_bfloat16(p[i]));
  }
  static __device__ void store(std::uint16_t* p, std::size_t i, float v) {
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

// --- convert ---------------------------------------------------------------------------

// float32/float64 -> float16/bfloat16: the scale in double, rounded once to float.
template <typename Wide, typename Narrow>
__global__ void narrow_kernel(const Wide* src, std::uint16_t* dst, std::size_t n, double f) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    Narrow::store(dst, i, static_cast<float>(static_cast<double>(src[i]) * f));
  }
}

template <typename Wide, typename Narrow>
__global__ void widen_kernel(const std::uint16_t* src, Wide* dst, std::size_t n, double f) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    dst[i] = static_cast<Wide>(static_cast<double>(Narrow::load(src, i)) * f);
  }
}

__global__ void scale_f32(const float* src, float* dst, std::size_t n, float f) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    dst[i] = src[i] * f;
  }
}

__global__ void scale_f64(const double* src, double* dst, std::size_t n, double f) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    dst[i] = src[i] * f;
  }
}

template <typename Narrow>
__global__ void scale_16(const std::uint16_t* src, std::uint16_t* dst, std::size_t n, float f) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    Narrow::store(dst, i, Narrow::load(src, i) * f);
  }
}

// Integers: truncated toward zero, as the CPU's (there in long double).
template <typename T>
__global__ void scale_int(const T* src, T* dst, std::size_t n, double f, double d) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    dst[i] = static_cast<T>(trunc(static_cast<double>(src[i]) * f / d));
  }
}

template <typename T>
cudaError_t scale_int_launch(const void* src, void* dst, std::size_t n, double f, double d,
                             cudaStream_t s) {
  scale_int<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(src), static_cast<T*>(dst),
                                                  n, f, d);
  return cudaGetLastError();
}

cudaError_t scale_same(void* dst, const void* src, std::size_t n, DataType t, double factor,
                       double divisor, cudaStream_t s) {
  if ((factor == 1.0 && divisor == 1.0) || t == DataType::kBool) {
    if (n == 0 || dst == src) return cudaSuccess;
    return cudaMemcpyAsync(dst, src, n * dtype_size(t), cudaMemcpyDefault, s);
  }
  const double ratio = factor / divisor;
  const unsigned b = blocks_for(n);
  switch (t) {
    case DataType::kFloat32:
      scale_f32<<<b, kThreads, 0, s>>>(static_cast<const float*>(src), static_cast<float*>(dst), n,
                                       static_cast<float>(ratio));
      return cudaGetLastError();
    case DataType::kFloat64:
      scale_f64<<<b, kThreads, 0, s>>>(static_cast<const double*>(src), static_cast<double*>(dst),
                                       n, ratio);
      return cudaGetLastError();
    case DataType::kFloat16:
      scale_16<Half><<<b, kThreads, 0, s>>>(static_cast<const std::uint16_t*>(src),
                                            static_cast<std::uint16_t*>(dst), n,
                                            static_cast<float>(ratio));
      return cudaGetLastError();
    case DataType::kBFloat16:
      scale_16<BFloat><<<b, kThreads, 0, s>>>(static_cast<const std::uint16_t*>(src),
                                              static_cast<std::uint16_t*>(dst), n,
                                              static_cast<float>(ratio));
      return cudaGetLastError();
    case DataType::kInt8:
      return scale_int_launch<std::int8_t>(src, dst, n, factor, divisor, s);
    case DataType::kUInt8:
      return scale_int_launch<std::uint8_t>(src, dst, n, factor, divisor, s);
    case DataType::kInt32:
      return scale_int_launch<std::int32_t>(src, dst, n, factor, divisor, s);
    case DataType::kInt64:
      return scale_int_launch<std::int64_t>(src, dst, n, factor, divisor, s);
    case DataType::kBool:
      break;
  }
  return cudaErrorInvalidValue;
}

template <typename Wide>
cudaError_t narrow_launch(const void* src, void* dst, std::size_t n, DataType to, double f,
                          cudaStream_t s) {
  const unsigned b = blocks_for(n);
  auto* out = static_cast<std::uint16_t*>(dst);
  if (to == DataType::kFloat16) {
    narrow_kernel<Wide, Half><<<b, kThreads, 0, s>>>(static_cast<const Wide*>(src), out, n, f);
  } else {
    narrow_kernel<Wide, BFloat><<<b, kThreads, 0, s>>>(static_cast<const Wide*>(src), out, n, f);
  }
  return cudaGetLastError();
}

template <typename Wide>
cudaError_t widen_launch(const void* src, void* dst, std::size_t n, DataType from, double f,
                         cudaStream_t s) {
  const unsigned b = blocks_for(n);
  const auto* in = static_cast<const std::uint16_t*>(src);
  if (from == DataType::kFloat16) {
    widen_kernel<Wide, Half><<<b, kThreads, 0, s>>>(in, static_cast<Wide*>(dst), n, f);
  } else {
    widen_kernel<Wide, BFloat><<<b, kThreads, 0, s>>>(in, static_cast<Wide*>(dst), n, f);
  }
  return cudaGetLastError();
}

bool wide(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64; }
bool narrow(DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; }

// --- reduce ----------------------------------------------------------------------------

template <typename T>
__device__ T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      return b < a ? b : a;
    case ReduceOp::kMax:
      return a < b ? b : a;
  }
  return a;
}

template <typename T>
__global__ void reduce_native(T* dst, const T* src, std::size_t n, ReduceOp op) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    dst[i] = combine(dst[i], src[i], op);
  }
}

template <typename Narrow>
__global__ void reduce_16(std::uint16_t* dst, const std::uint16_t* src, std::size_t n,
                          ReduceOp op) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    Narrow::store(dst, i, combine(Narrow::load(dst, i), Narrow::load(src, i), op));
  }
}

__global__ void reduce_bool(std::uint8_t* dst, const std::uint8_t* src, std::size_t n, bool any) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const bool a = dst[i] != 0, b = src[i] != 0;
    dst[i] = any ? (a || b) : (a && b);
  }
}

template <typename T>
cudaError_t reduce_launch(void* dst, const void* src, std::size_t n, ReduceOp op, cudaStream_t s) {
  reduce_native<T>
      <<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(dst), static_cast<const T*>(src), n, op);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_convert(void* dst, DataType to, const void* src, DataType from,
                           std::size_t count, double factor, double divisor, cudaStream_t stream) {
  if (from == to) return scale_same(dst, src, count, to, factor, divisor, stream);
  if (count == 0) return cudaSuccess;
  const double f = factor / divisor;
  if (wide(from) && narrow(to)) {
    return from == DataType::kFloat32 ? narrow_launch<float>(src, dst, count, to, f, stream)
                                      : narrow_launch<double>(src, dst, count, to, f, stream);
  }
  if (narrow(from) && wide(to)) {
    return to == DataType::kFloat32 ? widen_launch<float>(src, dst, count, from, f, stream)
                                    : widen_launch<double>(src, dst, count, from, f, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_reduce(void* dst, const void* src, std::size_t count, DataType dtype,
                          ReduceOp op, cudaStream_t stream) {
  if (op == ReduceOp::kAverage) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const unsigned b = blocks_for(count);
  switch (dtype) {
    case DataType::kFloat32:
      return reduce_launch<float>(dst, src, count, op, stream);
    case DataType::kFloat64:
      return reduce_launch<double>(dst, src, count, op, stream);
    case DataType::kFloat16:
      reduce_16<Half><<<b, kThreads, 0, stream>>>(
          static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(src), count, op);
      return cudaGetLastError();
    case DataType::kBFloat16:
      reduce_16<BFloat><<<b, kThreads, 0, stream>>>(
          static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(src), count, op);
      return cudaGetLastError();
    case DataType::kInt8:
      return reduce_launch<std::int8_t>(dst, src, count, op, stream);
    case DataType::kUInt8:
      return reduce_launch<std::uint8_t>(dst, src, count, op, stream);
    case DataType::kInt32:
      return reduce_launch<std::int32_t>(dst, src, count, op, stream);
    case DataType::kInt64:
      return reduce_launch<std::int64_t>(dst, src, count, op, stream);
    case DataType::kBool:
      reduce_bool<<<b, kThreads, 0, stream>>>(static_cast<std::uint8_t*>(dst),
                                              static_cast<const std::uint8_t*>(src), count,
                                              op == ReduceOp::kSum || op == ReduceOp::kMax);
      return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

}  // namespace kolo::device::cuda
