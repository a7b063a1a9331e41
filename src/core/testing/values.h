// Test helper: read and write tensor elements of any dtype as double, and deterministic
// per-rank test values chosen so that reductions are exact in every dtype.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/reduce.h"
#include "common/testing/elements.h"
#include "kolo/types.h"

namespace kolo::core::testing {

// Every dtype and every reduction, for tests that sweep them all.
inline constexpr const auto& kAllDtypes = kolo::testing::kEveryDtype;
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kProduct};

inline double get_value(const void* data, DataType dtype, std::size_t i) {
  return kolo::testing::load_element(data, dtype, i);
}

inline void set_value(void* data, DataType dtype, std::size_t i, double v) {
  kolo::testing::store_element(data, dtype, i, v);
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
  const std::uint64_t h =
      mix((static_cast<std::uint64_t>(rank) << 40) ^ i ^ (std::uint64_t(salt) << 56));
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
