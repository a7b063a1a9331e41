// Dtype conversion with scaling, for compressed allreduces: float32/float64 tensors travel
// as float16 or bfloat16 (Horovod's fp16 compression), converted while they are packed
// into the fusion buffer and back while they are unpacked, with the scale factors applied
// in the wider type on the way.
//
// Not for: integer or bool conversions (compression applies to floating types only) or
// reductions (reduce.h).
#pragma once

#include <cstddef>

#include "kolo/types.h"

namespace kolo {

// True when convert_scaled() supports from -> to: the same dtype (any), or between
// {float32, float64} and {float16, bfloat16}.
bool can_convert(DataType from, DataType to);

// dst[i] = to(src[i] * factor / divisor) for i < count. Same dtype: scale_into()
// (a plain copy when factor/divisor are 1). Non-finite values pass through; float16 overflows to
// inf.
void convert_scaled(const void* src, DataType from, void* dst, DataType to, std::size_t count,
                    double factor = 1.0, double divisor = 1.0);

// The wire dtype of a tensor of `dtype` under `compression`: float16/bfloat16 for float32
// and float64 tensors, else the dtype itself.
DataType wire_dtype(DataType dtype, Compression compression);

}  // namespace kolo
