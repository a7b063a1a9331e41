// Pieces shared by the transport check programs that run under mpirun (kolo_shm_check,
// kolo_hier_check): the dtype/op/size sweep, exact small-integer inputs and their
// reference fold, element access for every dtype, and a Checker that prints PASS/FAIL per
// group with every rank's verdict ANDed. Test code only.
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

inline void store(DataType dt, void* buf, std::size_t i, std::int64_t v) {
  kolo::testing::store_element(buf, dt, i, v);
}

inline double load(DataType dt, const void* buf, std::size_t i) {
  return kolo::testing::load_element(buf, dt, i);
}

// Counts cases and failures of one group at a time; end_group() ANDs every rank's verdict
// through the communicator under test (bounded by `verdict_timeout`) and rank 0 prints it.
class Checker {
 public:
  Checker(Communicator* comm, std::chrono::seconds verdict_timeout)
      : comm_(comm), verdict_timeout_(verdict_timeout) {}
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
  void end_group(const char* name) {
    std::vector<std::uint64_t> ok = {ok_ ? 1u : 0u};
    if (!comm_->control_and(ok, Clock::now() + verdict_timeout_).ok()) {
      fail(std::string(name) + ": verdict exchange failed");
    }
    if (comm_->rank() == 0)
      std::printf("%s %s (%d cases)\n", ok[0] ? "PASS" : "FAIL", name, cases_);
    std::fflush(stdout);
    ok_ = true;
    cases_ = 0;
  }
  int failures() const { return failures_; }

 private:
  Communicator* comm_;
  std::chrono::seconds verdict_timeout_;
  bool ok_ = true;
  int cases_ = 0;
  int failures_ = 0;
};

}  // namespace kolo::transport::check
