// Test helper: read and write tensor elements of any dtype as double, and deterministic
// per-rank test values chosen so that reductions are exact in every dtype.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/reduce.h"
#include "kolo/types.h"

namespace kolo::core::testing {

// Every dtype and every reduction, for tests that sweep them all.
inline constexpr DataType kAllDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                          DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                          DataType::kInt32,   DataType::kInt64,   DataType::kBool};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kProduct};

inline double get_value(const void* data, DataType dtype, std::size_t i) {
  switch (dtype) {
    case DataType::kFloat32: return static_cast<const float*>(data)[i];
    case DataType::kFloat64: return static_cast<const double*>(data)[i];
    case DataType::kFloat16: return half_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DataType::kBFloat16: return bfloat16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DataType::kInt8: return static_cast<const std::int8_t*>(data)[i];
    case DataType::kUInt8: return static_cast<const std::uint8_t*>(data)[i];
    case DataType::kInt32: return static_cast<const std::int32_t*>(data)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const std::int64_t*>(data)[i]);
    case DataType::kBool: return static_cast<const std::uint8_t*>(data)[i] ? 1 : 0;
  }
  return 0;
}

inline void set_value(void* data, DataType dtype, std::size_t i, double v) {
  switch (dtype) {
    case DataType::kFloat32: static_cast<float*>(data)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(data)[i] = v; break;
    case DataType::kFloat16:
      static_cast<std::uint16_t*>(data)[i] = float_to_half(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<std::uint16_t*>(data)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DataType::kInt8: static_cast<std::int8_t*>(data)[i] = static_cast<std::int8_t>(v); break;
    case DataType::kUInt8: static_cast<std::uint8_t*>(data)[i] = static_cast<std::uint8_t>(v); break;
    case DataType::kInt32: static_cast<std::int32_t*>(data)[i] = static_cast<std::int32_t>(v); break;
    case DataType::kInt64: static_cast<std::int64_t*>(data)[i] = static_cast<std::int64_t>(v); break;
    case DataType::kBool: static_cast<std::uint8_t*>(data)[i] = v != 0; break;
  }
}

inline bool is_unsigned(DataType d) { return d == DataType::kUInt8 || d == DataType::kBool; }
inline bool is_float(DataType d) {
  return d == DataType::kFloat32 || d == DataType::kFloat64 || d == DataType::kFloat16 ||
         d == DataType::kBFloat16;
}

inline std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// A small integer for (rank, i): every sum, min, max and product over up to 8 ranks is
// exactly representable in every dtype (int8 included).
inline double test_value(int rank, std::size_t i, DataType dtype, ReduceOp op, int salt = 0) {
  const std::uint64_t h = mix((static_cast<std::uint64_t>(rank) << 40) ^ i ^ (std::uint64_t(salt) << 56));
  if (dtype == DataType::kBool) return static_cast<double>(h & 1);
  if (op == ReduceOp::kProduct) {
    // At most three ranks contribute a factor 2, the others +-1: |product| <= 8.
    if (rank < 3) return (h & 1) ? 2 : 1;
    return is_unsigned(dtype) ? 1 : ((h & 1) ? -1 : 1);
  }
  const int v = static_cast<int>(h % 7);  // 0..6
  return is_unsigned(dtype) ? v : v - 3;  // sums of 8 ranks stay within [-24, 48]
}

}  // namespace kolo::core::testing
