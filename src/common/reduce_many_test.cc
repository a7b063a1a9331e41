// reduce_many (common/reduce.h) against reduce_into, the two-operand reference kernel.
//
// For every dtype and op, with 1-5 sources and lengths around the kernel's block size:
// two sources must give reduce_into's bits exactly (random data, including NaN and
// subnormal float16 patterns); more sources must equal reduce_into folded in source order
// on values where every intermediate is exact, and dst may be one of the sources. The
// branch-free float16/bfloat16 conversions are checked exhaustively through max(x, x).
// Every check runs on reduce_many and on reduce_many_portable (no F16C), so both the
// hardware and the portable float16 paths are covered on CPUs with F16C.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/reduce.h"
#include "common/testing/elements.h"

namespace kolo {
namespace {

constexpr const auto& kDtypes = kolo::testing::kEveryDtype;
constexpr const auto& kOps = kolo::testing::kTransportOps;
// Around the 4 KiB accumulator block for every element size.
constexpr std::size_t kCounts[] = {0, 1, 7, 511, 512, 1024, 2048, 4097, 10000};

using Bytes = std::vector<std::uint8_t>;
using Kernel = void (*)(void*, const void* const*, int, std::size_t, DataType, ReduceOp);
// The dispatching kernel (F16C for float16 where the CPU has it) and the portable one.
const std::pair<const char*, Kernel> kKernels[] = {{"reduce_many", &reduce_many},
                                                   {"reduce_many_portable", &reduce_many_portable}};

// Random bytes: every bit pattern, so NaNs, infinities and subnormals occur.
Bytes random_bytes(std::size_t n, std::mt19937_64& rng) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

// Small integers stored as `dtype`: sums and products of up to 5 of them stay exact.
Bytes small_values(DataType dtype, std::size_t count, std::mt19937_64& rng) {
  const std::size_t es = dtype_size(dtype);
  Bytes b(count * es);
  for (std::size_t i = 0; i < count; ++i) {
    const int v = static_cast<int>(rng() % 5) - 2;  // -2..2
    kolo::testing::store_small(b.data(), dtype, i, v);
  }
  return b;
}

// Bytes equal, except that two NaNs of a floating type count as equal.
::testing::AssertionResult same_values(DataType dtype, const Bytes& want, const Bytes& got) {
  const std::size_t es = dtype_size(dtype);
  for (std::size_t i = 0; i < want.size() / es; ++i) {
    if (std::memcmp(want.data() + i * es, got.data() + i * es, es) == 0) continue;
    auto nan = [&](const Bytes& b) {
      const std::uint8_t* p = b.data() + i * es;
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      switch (dtype) {
        case DataType::kFloat32: {
          float f;
          std::memcpy(&f, p, 4);
          return f != f;
        }
        case DataType::kFloat64: {
          double f;
          std::memcpy(&f, p, 8);
          return f != f;
        }
        case DataType::kFloat16:
          return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        case DataType::kBFloat16:
          return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
        default:
          return false;
      }
    };
    if (nan(want) && nan(got)) continue;
    return ::testing::AssertionFailure() << "element " << i << " differs";
  }
  return ::testing::AssertionSuccess();
}

class ReduceManyTest : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReduceManyTest, TwoSourcesGiveReduceIntoBitsOnRandomData) {
  const auto [dtype, op] = GetParam();
  std::mt19937_64 rng(42);
  for (std::size_t count : kCounts) {
    const std::size_t bytes = count * dtype_size(dtype);
    const Bytes a = random_bytes(bytes, rng), b = random_bytes(bytes, rng);
    Bytes want = a;
    reduce_into(want.data(), b.data(), count, dtype, op);
    for (const auto& [name, kernel] : kKernels) {
      Bytes got(bytes, 0xee);
      const void* srcs[] = {a.data(), b.data()};
      kernel(got.data(), srcs, 2, count, dtype, op);
      EXPECT_TRUE(same_values(dtype, want, got)) << name << " count " << count;
    }
  }
}

TEST_P(ReduceManyTest, ManySourcesFoldInOrderAndDstMayAliasASource) {
  const auto [dtype, op] = GetParam();
  std::mt19937_64 rng(7);
  for (int nsrc = 1; nsrc <= 5; ++nsrc) {
    for (std::size_t count : kCounts) {
      std::vector<Bytes> in;
      for (int k = 0; k < nsrc; ++k) in.push_back(small_values(dtype, count, rng));
      Bytes want = in[0];
      for (int k = 1; k < nsrc; ++k) reduce_into(want.data(), in[k].data(), count, dtype, op);
      std::vector<const void*> srcs;
      for (const auto& s : in) srcs.push_back(s.data());
      for (const auto& [name, kernel] : kKernels) {
        Bytes got(want.size() + 1, 0xee);  // one guard byte past the end
        kernel(got.data(), srcs.data(), nsrc, count, dtype, op);
        EXPECT_EQ(got.back(), 0xee) << name << " wrote past count";
        got.pop_back();
        EXPECT_TRUE(same_values(dtype, want, got))
            << name << " " << nsrc << " sources, count " << count;
        // In place into each source in turn.
        for (int k = 0; k < nsrc; ++k) {
          std::vector<Bytes> copy = in;
          std::vector<const void*> csrcs;
          for (const auto& s : copy) csrcs.push_back(s.data());
          kernel(copy[k].data(), csrcs.data(), nsrc, count, dtype, op);
          EXPECT_TRUE(same_values(dtype, want, copy[k]))
              << name << " dst = source " << k << " of " << nsrc;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAndOps, ReduceManyTest,
                         ::testing::Combine(::testing::ValuesIn(kDtypes),
                                            ::testing::ValuesIn(kOps)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  reduce_op_name(std::get<1>(info.param));
                         });

// max(x, x) == x runs every 16-bit pattern through the fast conversion to float and back.
TEST(ReduceManyConversionTest, SixteenBitRoundTripIsExhaustivelyExact) {
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<std::uint16_t> all(0x10000), got(0x10000), want(0x10000);
    for (std::uint32_t i = 0; i < 0x10000; ++i) all[i] = static_cast<std::uint16_t>(i);
    want = all;
    reduce_into(want.data(), all.data(), all.size(), dtype, ReduceOp::kMax);
    const void* srcs[] = {all.data(), all.data()};
    for (const auto& [name, kernel] : kKernels) {
      kernel(got.data(), srcs, 2, all.size(), dtype, ReduceOp::kMax);
      for (std::uint32_t i = 0; i < 0x10000; ++i) {
        const bool nan = (want[i] & 0x7c00) == 0x7c00 && (want[i] & 0x3ff) != 0 &&
                         dtype == DataType::kFloat16 && (got[i] & 0x7c00) == 0x7c00 &&
                         (got[i] & 0x3ff) != 0;  // F16C keeps more of a NaN's payload
        if (!nan) {
          ASSERT_EQ(got[i], want[i]) << name << " " << dtype_name(dtype) << " " << std::hex << i;
        }
      }
    }
  }
}

// Sums and products of a million random float16 pairs reach every range float -> float16
// rounding has (overflow, normal ties, subnormals, underflow to zero, NaN).
TEST(ReduceManyConversionTest, FloatToHalfMatchesTheScalarConversion) {
  std::vector<std::uint16_t> a, b;
  std::mt19937_64 rng(3);
  for (std::size_t i = 0; i < 1000000; ++i) {
    a.push_back(static_cast<std::uint16_t>(rng()));
    b.push_back(static_cast<std::uint16_t>(rng()));
  }
  for (ReduceOp op : {ReduceOp::kProduct, ReduceOp::kSum}) {
    std::vector<std::uint16_t> want = a, got(a.size());
    reduce_into(want.data(), b.data(), a.size(), DataType::kFloat16, op);
    const void* srcs[] = {a.data(), b.data()};
    for (const auto& [name, kernel] : kKernels) {
      kernel(got.data(), srcs, 2, a.size(), DataType::kFloat16, op);
      const Bytes wb(reinterpret_cast<std::uint8_t*>(want.data()),
                     reinterpret_cast<std::uint8_t*>(want.data() + want.size()));
      const Bytes gb(reinterpret_cast<std::uint8_t*>(got.data()),
                     reinterpret_cast<std::uint8_t*>(got.data() + got.size()));
      EXPECT_TRUE(same_values(DataType::kFloat16, wb, gb)) << name << " " << reduce_op_name(op);
    }
  }
}

}  // namespace
}  // namespace kolo
