// Pieces shared by the transport check programs (kolo_mpi_check, kolo_gloo_check,
// kolo_shm_check, kolo_hier_check): the dtype/op/size sweep, exact small-integer inputs and
// their reference fold, element access for every dtype, how a survivor names a dead rank,
// and a Checker that prints PASS/FAIL per group with every rank's verdict ANDed. Test code
// only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/reduce.h"
#include "common/testing/elements.h"
#include "transport/communicator.h"

namespace kolo::transport::check {

inline constexpr const auto& kDtypes = kolo::testing::kEveryDtype;
inline constexpr const auto& kOps = kolo::testing::kTransportOps;
// With KOLO_FUSION_THRESHOLD=1048576 (1 MiB regions) the two large sizes take several chunks.
inline constexpr std::size_t kSizes[] = {
    0, 1, 7, 1024, std::size_t{1} << 20, (std::size_t{3} << 20) + 5};

// Whether the sweep runs the sizes past one segment or region (above 1024 elements) for
// this dtype and op. Every (dtype, op) runs the edge sizes (0, 1, odd, 1024); the large
// ones, which test chunking and segmenting (a matter of bytes, not of the op), run for
// sum in every dtype and for one more op per dtype in turn, so every dtype, every op and
// every element size (1, 2, 4 and 8 bytes) still meets them: 15 of the 36 pairs, which
// keeps each check program under ~10 s on 2 cores.
// With `every_sum` false, only the op in turn: 9 pairs (the hierarchical check, whose
// kernels are the shm check's).
inline bool large_case(DataType dt, ReduceOp op, bool every_sum = true) {
  int d = 0, k = 0;
  while (kDtypes[d] != dt) ++d;
  while (kOps[k] != op) ++k;
  return (every_sum && op == ReduceOp::kSum) || (d + k) % 4 == 0;
}

// Whether `dt` is the first dtype of its element size in kDtypes (float32, float64,
// float16, int8): the byte collectives, blind to the dtype but for its size, run their
// large sizes for these only.
inline bool first_of_its_size(DataType dt) {
  for (DataType other : kDtypes) {
    if (dtype_size(other) == dtype_size(dt)) return other == dt;
  }
  return false;
}

// Rank `rank`'s element i. Values stay tiny so every reduction is exact in every dtype
// (int8 and bfloat16 included) on any number of ranks up to 42: sums of -3..3, products
// of {1, 2, -1} with 2 only on ranks 0-3 (|product| <= 16), booleans, and for uint8 0..3
// (products 1..16).
inline std::int64_t input(int rank, std::size_t i, DataType dt, ReduceOp op) {
  const auto h = static_cast<std::uint32_t>(
      ((i * 1000003ull + static_cast<std::uint64_t>(rank)) * 0x9e3779b97f4a7c15ull) >> 32);
  const bool is_unsigned = dt == DataType::kUInt8;
  if (dt == DataType::kBool) return h % 3 != 0;
  if (op == ReduceOp::kProduct) {
    if (rank >= 4) return is_unsigned || (h & 1) ? 1 : -1;
    if (is_unsigned) return h % 2 ? 2 : 1;
    static const int kValues[] = {1, 2, -1};
    return kValues[h % 3];
  }
  return is_unsigned ? static_cast<std::int64_t>(h % 4) : static_cast<std::int64_t>(h % 7) - 3;
}

inline std::int64_t fold(DataType dt, ReduceOp op, std::int64_t a, std::int64_t b) {
  if (dt == DataType::kBool)
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (a || b) : (a && b);
  if (op == ReduceOp::kMin) return std::min(a, b);
  if (op == ReduceOp::kMax) return std::max(a, b);
  if (op == ReduceOp::kProduct) return a * b;
  return a + b;
}

inline void store(DataType dt, void* buf, std::size_t i, std::int64_t v) {
  kolo::testing::store_element(buf, dt, i, v);
}

inline double load(DataType dt, const void* buf, std::size_t i) {
  return kolo::testing::load_element(buf, dt, i);
}

// Whether a survivor's error names world rank `victim` as the one that died, in any of the
// ways the layers say it: shm host-mates ("rank 2 did not take part"), a Gloo
// communicator that saw the process go ("rank 2 is gone", in a sub-communicator "rank 1
// (world rank 2) is gone"), or the launcher's notice ("rank 2 (host a) was killed ...").
inline bool names_dead_rank(const std::string& message, int victim) {
  const std::string r = "rank " + std::to_string(victim);
  for (const std::string& phrase :
       {r + " did not take part", r + " is gone", "(world " + r + ") is gone", r + " (host "}) {
    if (message.find(phrase) != std::string::npos) return true;
  }
  return false;
}

// Counts cases and failures of one group at a time; end_group() ANDs every rank's verdict
// through the communicator under test (bounded by `verdict_timeout`) and rank 0 prints it.
class Checker {
 public:
  Checker(Communicator* comm, std::chrono::seconds verdict_timeout)
      : comm_(comm), verdict_timeout_(verdict_timeout) {}
  // Records a failed case (printed at once by the rank that saw it).
  void fail(const std::string& what) {
    ++failures_;
    ok_ = false;
    if (failures_ <= 20) std::printf("FAIL [rank %d] %s\n", comm_->rank(), what.c_str());
    std::fflush(stdout);
  }
  bool expect_ok(const Status& s, const std::string& what) {
    if (!s.ok()) fail(what + ": " + s.to_string());
    return s.ok();
  }
  void count() { ++cases_; }
  void end_group(const std::string& name) {
    std::vector<std::uint64_t> ok = {ok_ ? 1u : 0u};
    const Status s = comm_->control_and(ok, Clock::now() + verdict_timeout_);
    if (!s.ok()) fail(name + ": could not collect the verdicts: " + s.to_string());
    if (comm_->rank() == 0) {
      const bool pass = s.ok() && ok[0] == 1;
      std::printf("%s %s (%d cases)\n", pass ? "PASS" : "FAIL", name.c_str(), cases_);
      std::fflush(stdout);
    }
    total_cases_ += cases_;
    cases_ = 0;
    ok_ = true;
  }
  int failures() const { return failures_; }
  int total_cases() const { return total_cases_; }

 private:
  Communicator* comm_;
  std::chrono::seconds verdict_timeout_;
  bool ok_ = true;
  int cases_ = 0;
  int total_cases_ = 0;
  int failures_ = 0;
};

}  // namespace kolo::transport::check
