#include "common/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace kolo {

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000u) {                        // result is subnormal or zero
    if (abs < 0x33000000u) return sign;           // below half the smallest subnormal
    // value = m * 2^(e - 150) and a subnormal half counts units of 2^-24, so the half's
    // mantissa is m >> (126 - e), rounded to nearest even.
    const std::uint32_t e = abs >> 23;
    const std::uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - e;
    std::uint32_t result = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits (nearest even)
  std::uint32_t r = abs - (112u << 23);
  const std::uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

float bfloat16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t float_to_bfloat16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<std::uint16_t>(x >> 16);
}

namespace {

template <typename T, typename F>
void apply(void* dst, const void* src, std::size_t n, F f) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (std::size_t i = 0; i < n; ++i) d[i] = f(d[i], s[i]);
}

// Integer sums and products wrap around: they are computed in the unsigned type, where
// overflow is defined (signed overflow in int32/int64 would be undefined behaviour).
template <typename T>
T wrapping(T a, T b, bool product) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    const U ua = static_cast<U>(a), ub = static_cast<U>(b);
    return static_cast<T>(static_cast<U>(product ? ua * ub : ua + ub));
  } else {
    return product ? a * b : a + b;
  }
}

template <typename T>
void reduce_native(void* dst, const void* src, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      apply<T>(dst, src, n, [](T a, T b) { return wrapping(a, b, false); });
      break;
    case ReduceOp::kMin:
      apply<T>(dst, src, n, [](T a, T b) { return std::min(a, b); });
      break;
    case ReduceOp::kMax:
      apply<T>(dst, src, n, [](T a, T b) { return std::max(a, b); });
      break;
    case ReduceOp::kProduct:
      apply<T>(dst, src, n, [](T a, T b) { return wrapping(a, b, true); });
      break;
  }
}

template <float (*ToF)(std::uint16_t), std::uint16_t (*FromF)(float)>
void reduce_16(void* dst, const void* src, std::size_t n, ReduceOp op) {
  auto run = [&](auto f) {
    apply<std::uint16_t>(
        dst, src, n, [&](std::uint16_t a, std::uint16_t b) { return FromF(f(ToF(a), ToF(b))); });
  };
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      run([](float a, float b) { return a + b; });
      break;
    case ReduceOp::kMin:
      run([](float a, float b) { return std::min(a, b); });
      break;
    case ReduceOp::kMax:
      run([](float a, float b) { return std::max(a, b); });
      break;
    case ReduceOp::kProduct:
      run([](float a, float b) { return a * b; });
      break;
  }
}

void reduce_bool(void* dst, const void* src, std::size_t n, ReduceOp op) {
  const bool is_or = op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kAverage;
  apply<std::uint8_t>(dst, src, n, [is_or](std::uint8_t a, std::uint8_t b) {
    return static_cast<std::uint8_t>(is_or ? (a || b) : (a && b));
  });
}

template <typename T>
void scale_int(void* dst, const void* src, std::size_t n, double factor, double divisor) {
  T* out = static_cast<T*>(dst);
  const T* in = static_cast<const T*>(src);
  const long double f = factor, d = divisor;
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<T>(std::trunc(in[i] * f / d));
}

template <float (*ToF)(std::uint16_t), std::uint16_t (*FromF)(float)>
void scale_16(void* dst, const void* src, std::size_t n, double factor) {
  auto* out = static_cast<std::uint16_t*>(dst);
  const auto* in = static_cast<const std::uint16_t*>(src);
  const float f = static_cast<float>(factor);
  for (std::size_t i = 0; i < n; ++i) out[i] = FromF(ToF(in[i]) * f);
}

template <typename T>
void fill_typed(void* buf, std::size_t n, T value) {
  std::fill_n(static_cast<T*>(buf), n, value);
}

// The identity of `op` for a native type.
template <typename T>
T identity_of(ReduceOp op) {
  using L = std::numeric_limits<T>;
  switch (op) {
    case ReduceOp::kProduct:
      return T(1);
    case ReduceOp::kMin:
      return L::has_infinity ? L::infinity() : L::max();
    case ReduceOp::kMax:
      return L::has_infinity ? -L::infinity() : L::lowest();
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      break;
  }
  return T(0);
}

}  // namespace

void fill_identity(void* buf, std::size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32:
      return fill_typed(buf, count, identity_of<float>(op));
    case DataType::kFloat64:
      return fill_typed(buf, count, identity_of<double>(op));
    case DataType::kFloat16:
      return fill_typed(buf, count, float_to_half(identity_of<float>(op)));
    case DataType::kBFloat16:
      return fill_typed(buf, count, float_to_bfloat16(identity_of<float>(op)));
    case DataType::kInt8:
      return fill_typed(buf, count, identity_of<std::int8_t>(op));
    case DataType::kUInt8:
      return fill_typed(buf, count, identity_of<std::uint8_t>(op));
    case DataType::kInt32:
      return fill_typed(buf, count, identity_of<std::int32_t>(op));
    case DataType::kInt64:
      return fill_typed(buf, count, identity_of<std::int64_t>(op));
    case DataType::kBool:
      return fill_typed(
          buf, count, static_cast<std::uint8_t>(op == ReduceOp::kProduct || op == ReduceOp::kMin));
  }
}

void reduce_into(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32:
      return reduce_native<float>(dst, src, count, op);
    case DataType::kFloat64:
      return reduce_native<double>(dst, src, count, op);
    case DataType::kFloat16:
      return reduce_16<half_to_float, float_to_half>(dst, src, count, op);
    case DataType::kBFloat16:
      return reduce_16<bfloat16_to_float, float_to_bfloat16>(dst, src, count, op);
    case DataType::kInt8:
      return reduce_native<std::int8_t>(dst, src, count, op);
    case DataType::kUInt8:
      return reduce_native<std::uint8_t>(dst, src, count, op);
    case DataType::kInt32:
      return reduce_native<std::int32_t>(dst, src, count, op);
    case DataType::kInt64:
      return reduce_native<std::int64_t>(dst, src, count, op);
    case DataType::kBool:
      return reduce_bool(dst, src, count, op);
  }
}

void scale_into(void* dst, const void* src, std::size_t count, DataType dtype, double factor,
                double divisor) {
  if (factor == 1.0 && divisor == 1.0) {
    if (count && dst != src) std::memmove(dst, src, count * dtype_size(dtype));
    return;
  }
  const double ratio = factor / divisor;
  switch (dtype) {
    case DataType::kFloat32: {
      auto* out = static_cast<float*>(dst);
      const auto* in = static_cast<const float*>(src);
      const float f = static_cast<float>(ratio);
      for (std::size_t i = 0; i < count; ++i) out[i] = in[i] * f;
      return;
    }
    case DataType::kFloat64: {
      auto* out = static_cast<double*>(dst);
      const auto* in = static_cast<const double*>(src);
      for (std::size_t i = 0; i < count; ++i) out[i] = in[i] * ratio;
      return;
    }
    case DataType::kFloat16:
      return scale_16<half_to_float, float_to_half>(dst, src, count, ratio);
    case DataType::kBFloat16:
      return scale_16<bfloat16_to_float, float_to_bfloat16>(dst, src, count, ratio);
    case DataType::kInt8:
      return scale_int<std::int8_t>(dst, src, count, factor, divisor);
    case DataType::kUInt8:
      return scale_int<std::uint8_t>(dst, src, count, factor, divisor);
    case DataType::kInt32:
      return scale_int<std::int32_t>(dst, src, count, factor, divisor);
    case DataType::kInt64:
      return scale_int<std::int64_t>(dst, src, count, factor, divisor);
    case DataType::kBool:
      if (count && dst != src) std::memmove(dst, src, count);
      return;
  }
}

void scale(void* buf, std::size_t count, DataType dtype, double factor, double divisor) {
  scale_into(buf, buf, count, dtype, factor, divisor);
}

}  // namespace kolo
