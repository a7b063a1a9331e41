// Pieces shared by kolo_hier_check's files (hier_check.cc: correctness cases, selection
// and main; hier_check_modes.cc: the kill test and the benchmark). Test code only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "common/reduce.h"
#include "transport/communicator.h"

namespace kolo::transport::hier {
class HierarchicalCommunicator;
}

namespace kolo::transport::hier_check {

// Deadline of calls expected to succeed: generous, for 6 ranks oversubscribed on 2 cores.
inline Deadline soon() { return Clock::now() + std::chrono::seconds(60); }

// Rank r's element i: small integers, so every dtype holds every result exactly: sums of
// -2..2, products of {-1, 1, 2} (at most 2^6 on 6 ranks), booleans, and for uint8 0..3
// (products 1..2).
inline std::int64_t input(int rank, std::size_t i, DataType dt, ReduceOp op) {
  const auto h = static_cast<std::uint32_t>(
      ((i * 1000003ull + static_cast<std::uint64_t>(rank)) * 0x9e3779b97f4a7c15ull) >> 32);
  if (dt == DataType::kBool) return h % 3 != 0;
  if (dt == DataType::kUInt8) return op == ReduceOp::kProduct ? 1 + h % 2 : h % 4;
  if (op == ReduceOp::kProduct) return h % 3 == 0 ? -1 : static_cast<std::int64_t>(1 + h % 3 / 2);
  return static_cast<std::int64_t>(h % 5) - 2;
}

inline std::int64_t fold(DataType dt, ReduceOp op, std::int64_t a, std::int64_t b) {
  if (dt == DataType::kBool)
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (a || b) : (a && b);
  if (op == ReduceOp::kMin) return std::min(a, b);
  if (op == ReduceOp::kMax) return std::max(a, b);
  if (op == ReduceOp::kProduct) return a * b;
  return a + b;
}

template <typename T>
void put(void* buf, std::size_t i, T x) {
  std::memcpy(static_cast<char*>(buf) + i * sizeof x, &x, sizeof x);
}
template <typename T>
T get(const void* buf, std::size_t i) {
  T x;
  std::memcpy(&x, static_cast<const char*>(buf) + i * sizeof x, sizeof x);
  return x;
}

inline void store(DataType dt, void* buf, std::size_t i, std::int64_t v) {
  const auto f = static_cast<float>(v);
  switch (dt) {
    case DataType::kFloat32:
      return put(buf, i, f);
    case DataType::kFloat64:
      return put(buf, i, static_cast<double>(v));
    case DataType::kFloat16:
      return put(buf, i, float_to_half(f));
    case DataType::kBFloat16:
      return put(buf, i, float_to_bfloat16(f));
    case DataType::kInt8:
      return put(buf, i, static_cast<std::int8_t>(v));
    case DataType::kUInt8:
      return put(buf, i, static_cast<std::uint8_t>(v));
    case DataType::kInt32:
      return put(buf, i, static_cast<std::int32_t>(v));
    case DataType::kInt64:
      return put(buf, i, v);
    case DataType::kBool:
      return put(buf, i, static_cast<std::uint8_t>(v != 0));
  }
}

inline double load(DataType dt, const void* buf, std::size_t i) {
  switch (dt) {
    case DataType::kFloat32:
      return get<float>(buf, i);
    case DataType::kFloat64:
      return get<double>(buf, i);
    case DataType::kFloat16:
      return half_to_float(get<std::uint16_t>(buf, i));
    case DataType::kBFloat16:
      return bfloat16_to_float(get<std::uint16_t>(buf, i));
    case DataType::kInt8:
      return get<std::int8_t>(buf, i);
    case DataType::kUInt8:
      return get<std::uint8_t>(buf, i);
    case DataType::kInt32:
      return get<std::int32_t>(buf, i);
    case DataType::kInt64:
      return static_cast<double>(get<std::int64_t>(buf, i));
    case DataType::kBool:
      return get<std::uint8_t>(buf, i);
  }
  return 0;
}

// Rank `victim` SIGKILLs itself while every rank runs chunked allreduces with a 3 s
// deadline; the others, on every host, must fail with kPeerFailure naming it within 2 s
// (long before the deadline: host-mates see it die, other hosts get a failure notice),
// then fail at once on the next call. Prints "PASS [rank r] hier kill-test ..." or FAIL
// per survivor; returns the exit code.
int run_kill_test(hier::HierarchicalCommunicator* comm, int victim);

// Times 64 MiB float32 allreduces: hierarchical zero-copy (fusion buffer) and copy path,
// kolo's MPI transport, and plain blocking MPI_Allreduce.
void run_bench(hier::HierarchicalCommunicator* comm);

}  // namespace kolo::transport::hier_check
