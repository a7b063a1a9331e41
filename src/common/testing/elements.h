// Test helper: element i of a buffer of any kolo dtype, read as double and written from a
// double or an int64 (the int64 form keeps 64-bit integers exact). Buffers need no
// alignment (memcpy). One copy for every test that fills or checks raw buffers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/reduce.h"
#include "kolo/types.h"

namespace kolo::testing {

// Every dtype, and the reductions a transport implements (average is the runtime's sum
// and scale), for tests that sweep them all.
inline constexpr DataType kEveryDtype[] = {
    DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
    DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
    DataType::kInt32,    DataType::kInt64,   DataType::kBool};
inline constexpr ReduceOp kTransportOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                                             ReduceOp::kProduct};

template <typename T>
T element_as(const void* buf, std::size_t i) {
  T x;
  std::memcpy(&x, static_cast<const char*>(buf) + i * sizeof x, sizeof x);
  return x;
}

template <typename T>
void put_element(void* buf, std::size_t i, T x) {
  std::memcpy(static_cast<char*>(buf) + i * sizeof x, &x, sizeof x);
}

// float16/bfloat16 round to nearest even from float; bool stores v != 0.
template <typename V>
requires std::is_same_v<V, double> || std::is_same_v<V, std::int64_t>
void store_element(void* buf, DataType dtype, std::size_t i, V v) {
  const auto f = static_cast<float>(v);
  switch (dtype) {
    case DataType::kFloat32:
      return put_element(buf, i, f);
    case DataType::kFloat64:
      return put_element(buf, i, static_cast<double>(v));
    case DataType::kFloat16:
      return put_element(buf, i, float_to_half(f));
    case DataType::kBFloat16:
      return put_element(buf, i, float_to_bfloat16(f));
    case DataType::kInt8:
      return put_element(buf, i, static_cast<std::int8_t>(v));
    case DataType::kUInt8:
      return put_element(buf, i, static_cast<std::uint8_t>(v));
    case DataType::kInt32:
      return put_element(buf, i, static_cast<std::int32_t>(v));
    case DataType::kInt64:
      return put_element(buf, i, static_cast<std::int64_t>(v));
    case DataType::kBool:
      return put_element(buf, i, static_cast<std::uint8_t>(v != 0));
  }
}

// A small signed integer v in [-2, 2] as a value every dtype holds exactly and whose
// sums and products over a few ranks stay exact: uint8 stores v + 2, bool stores v > 0.
inline void store_small(void* buf, DataType dtype, std::size_t i, int v) {
  const std::int64_t stored = dtype == DataType::kUInt8  ? v + 2
                              : dtype == DataType::kBool ? v > 0
                                                         : v;
  store_element(buf, dtype, i, stored);
}

// bool reads as its byte, so a result other than 0 or 1 shows.
inline double load_element(const void* buf, DataType dtype, std::size_t i) {
  switch (dtype) {
    case DataType::kFloat32:
      return element_as<float>(buf, i);
    case DataType::kFloat64:
      return element_as<double>(buf, i);
    case DataType::kFloat16:
      return half_to_float(element_as<std::uint16_t>(buf, i));
    case DataType::kBFloat16:
      return bfloat16_to_float(element_as<std::uint16_t>(buf, i));
    case DataType::kInt8:
      return element_as<std::int8_t>(buf, i);
    case DataType::kUInt8:
      return element_as<std::uint8_t>(buf, i);
    case DataType::kInt32:
      return element_as<std::int32_t>(buf, i);
    case DataType::kInt64:
      return static_cast<double>(element_as<std::int64_t>(buf, i));
    case DataType::kBool:
      return element_as<std::uint8_t>(buf, i);
  }
  return 0;
}

// The reference reduction of two values, in double. Average folds as a sum (the caller
// divides by the number of ranks).
inline double fold_reference(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      break;
  }
  return a + b;
}

}  // namespace kolo::testing
