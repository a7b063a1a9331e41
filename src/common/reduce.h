// Elementwise reduction and scaling kernels for every kolo dtype.
//
// Used by transports that reduce in their own code (inproc, MPI's user-defined op for
// float16/bfloat16/bool, shm's n-way reduce_many) and by the runtime for
// prescale/postscale/average. float16 and bfloat16 are converted to float32 for each
// operation. Not for: choosing algorithms or moving data; these are the inner loops only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kolo/types.h"

namespace kolo {

// dst[i] = op(dst[i], src[i]) for i < count. `op` must not be kAverage (averaging is a
// sum followed by scale()). For bool: sum/max = or, product/min = and.
void reduce_into(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op);

// dst[i] = op over srcs[0][i], srcs[1][i], ..., srcs[nsrc-1][i], folded in that order
// (((s0 op s1) op s2) ...), for i < count. `dst` may be one of `srcs` (the same pointer);
// no other overlap is allowed. nsrc >= 1; `op` must not be kAverage. Same results as
// repeated reduce_into in source order, except that float16/bfloat16 accumulate every
// source in float32 and round once at the end (more accurate for nsrc > 2; identical for
// nsrc <= 2). Written as plain loops over cache-sized blocks that GCC vectorises
// (reduce_many.cc); shm's allreduce spends its time here.
void reduce_many(void* dst, const void* const* srcs, int nsrc, std::size_t count, DataType dtype,
                 ReduceOp op);
// reduce_many without CPU-specific paths (float16/bfloat16 through AVX2+F16C): what
// runs on CPUs without them; for the tests.
void reduce_many_portable(void* dst, const void* const* srcs, int nsrc, std::size_t count,
                          DataType dtype, ReduceOp op);

// The reduction that runs for `op` on a transport or device: kAverage is a sum followed
// by a division (no transport or device kernel takes kAverage itself).
inline ReduceOp wire_op(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

// buf[i] = buf[i] * factor / divisor. Integers are computed in long double and truncated
// toward zero (so an average of integers divides exactly); bool is left unchanged
// (callers reject scaling of bool tensors).
void scale(void* buf, std::size_t count, DataType dtype, double factor, double divisor = 1.0);
// dst[i] = src[i] * factor / divisor in one pass (the same values as a copy followed by
// scale(), without reading and writing dst twice). dst == src is allowed; no other overlap.
void scale_into(void* dst, const void* src, std::size_t count, DataType dtype, double factor,
                double divisor = 1.0);

// buf[i] = the identity of `op` for i < count: the x with op(x, y) == y for every y. 0 for
// sum and average, 1 for product, the largest value (+inf for floating point) for min and
// the lowest (-inf) for max; bool: false for sum/max, true for product/min. What a rank
// that has joined contributes to the others' allreduces.
void fill_identity(void* buf, std::size_t count, DataType dtype, ReduceOp op);

// IEEE binary16 and bfloat16 conversions (round to nearest even).
float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);
float bfloat16_to_float(std::uint16_t b);
std::uint16_t float_to_bfloat16(float f);

}  // namespace kolo
