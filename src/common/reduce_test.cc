// Reduction kernels, scaling and the float16/bfloat16 conversions of common/reduce.h.
//
// Elementwise results are checked against values computed in double (all chosen inputs
// and results are exactly representable in every dtype, so the comparison is exact);
// the 16-bit conversions are checked against known bit patterns and exhaustively.
#include "common/reduce.h"
#include "common/testing/elements.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace kolo {
namespace {

// Bytes of `values` stored as `dtype`.
std::vector<std::uint8_t> encode(DataType dtype, const std::vector<double>& values) {
  std::vector<std::uint8_t> out(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    kolo::testing::store_element(out.data(), dtype, i, values[i]);
  }
  return out;
}

std::vector<double> decode(DataType dtype, const std::vector<std::uint8_t>& bytes) {
  std::vector<double> out(bytes.size() / dtype_size(dtype));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = kolo::testing::load_element(bytes.data(), dtype, i);
  return out;
}

double reference(ReduceOp op, double a, double b) {
  if (op == ReduceOp::kAverage) {
    ADD_FAILURE() << "no reference for average";
    return 0;
  }
  return kolo::testing::fold_reference(op, a, b);
}

class ReduceIntoTest : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReduceIntoTest, MatchesDoubleReference) {
  const auto [dtype, op] = GetParam();
  const bool is_unsigned = dtype == DataType::kUInt8;
  std::vector<double> a = {1, -2, 3, 0, 5, -4, 7};
  std::vector<double> b = {2, 3, -1, 7, 5, -2, -3};
  if (is_unsigned) {
    for (auto& v : a) v = std::abs(v);
    for (auto& v : b) v = std::abs(v);
  }
  auto dst = encode(dtype, a);
  const auto src = encode(dtype, b);
  // The last element lies past `count` and must be left alone.
  reduce_into(dst.data(), src.data(), a.size() - 1, dtype, op);
  const auto got = decode(dtype, dst);
  for (std::size_t i = 0; i + 1 < a.size(); ++i) {
    EXPECT_EQ(got[i], reference(op, a[i], b[i]))
        << dtype_name(dtype) << " " << reduce_op_name(op) << " at " << i;
  }
  EXPECT_EQ(got.back(), a.back()) << "element past count was written";
}

constexpr DataType kNonBool[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                 DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                 DataType::kInt32,    DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

INSTANTIATE_TEST_SUITE_P(AllDtypesAndOps, ReduceIntoTest,
                         ::testing::Combine(::testing::ValuesIn(kNonBool),
                                            ::testing::ValuesIn(kOps)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  reduce_op_name(std::get<1>(info.param));
                         });

TEST(ReduceIntoBoolTest, SumAndMaxAreOrProductAndMinAreAnd) {
  const std::vector<std::uint8_t> a = {0, 0, 1, 1};
  const std::vector<std::uint8_t> b = {0, 1, 0, 1};
  const std::vector<std::uint8_t> kOr = {0, 1, 1, 1};
  const std::vector<std::uint8_t> kAnd = {0, 0, 0, 1};
  for (ReduceOp op : kOps) {
    auto dst = a;
    reduce_into(dst.data(), b.data(), dst.size(), DataType::kBool, op);
    const bool is_or = op == ReduceOp::kSum || op == ReduceOp::kMax;
    EXPECT_EQ(dst, is_or ? kOr : kAnd) << reduce_op_name(op);
  }
}

TEST(ReduceIntoTest, HalfPrecisionRoundsResultToNearestEven) {
  // 2048 + 1 is a tie between 2048 and 2050 in float16; 2048 + 3 a tie between 2050 and 2052.
  std::uint16_t h[2] = {float_to_half(2048), float_to_half(2048)};
  const std::uint16_t h_add[2] = {float_to_half(1), float_to_half(3)};
  reduce_into(h, h_add, 2, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(half_to_float(h[0]), 2048.0f);
  EXPECT_EQ(half_to_float(h[1]), 2052.0f);
  // bfloat16 spacing at 256 is 2: 257 -> 256, 259 -> 260.
  std::uint16_t b[2] = {float_to_bfloat16(256), float_to_bfloat16(256)};
  const std::uint16_t b_add[2] = {float_to_bfloat16(1), float_to_bfloat16(3)};
  reduce_into(b, b_add, 2, DataType::kBFloat16, ReduceOp::kSum);
  EXPECT_EQ(bfloat16_to_float(b[0]), 256.0f);
  EXPECT_EQ(bfloat16_to_float(b[1]), 260.0f);
}

TEST(ScaleTest, IntegersTruncateTowardZero) {
  std::vector<std::int32_t> i32 = {7, -7, 6};
  scale(i32.data(), i32.size(), DataType::kInt32, 1.0, 3.0);
  EXPECT_EQ(i32, (std::vector<std::int32_t>{2, -2, 2}));

  std::vector<std::int8_t> i8 = {-128, 127, 5, -5};
  scale(i8.data(), i8.size(), DataType::kInt8, 0.5);
  EXPECT_EQ(i8, (std::vector<std::int8_t>{-64, 63, 2, -2}));

  std::vector<std::uint8_t> u8 = {255, 7, 1};
  scale(u8.data(), u8.size(), DataType::kUInt8, 1.0, 2.0);
  EXPECT_EQ(u8, (std::vector<std::uint8_t>{127, 3, 0}));

  std::vector<std::int64_t> i64 = {-9, 10, 1000000007};
  scale(i64.data(), i64.size(), DataType::kInt64, 3.0, 4.0);
  EXPECT_EQ(i64, (std::vector<std::int64_t>{-6, 7, 750000005}));
}

TEST(ScaleTest, Int64KeepsPrecisionBeyondDouble) {
  if (std::numeric_limits<long double>::digits <= 53) GTEST_SKIP() << "long double is double";
  const std::int64_t big = (std::int64_t{1} << 60) + 1;  // not representable in double
  std::vector<std::int64_t> v = {big, -big};
  scale(v.data(), v.size(), DataType::kInt64, 4.0, 4.0);
  EXPECT_EQ(v, (std::vector<std::int64_t>{big, -big}));
}

TEST(ScaleTest, FloatingTypesMultiplyByFactorOverDivisor) {
  std::vector<float> f32 = {1, 2, -3};
  scale(f32.data(), f32.size(), DataType::kFloat32, 3.0, 2.0);
  EXPECT_EQ(f32, (std::vector<float>{1.5f, 3.0f, -4.5f}));

  std::vector<double> f64 = {1, -2};
  scale(f64.data(), f64.size(), DataType::kFloat64, 0.1);
  EXPECT_DOUBLE_EQ(f64[0], 0.1);
  EXPECT_DOUBLE_EQ(f64[1], -0.2);

  std::vector<std::uint16_t> f16 = {float_to_half(1), float_to_half(-3), float_to_half(1000)};
  scale(f16.data(), f16.size(), DataType::kFloat16, 1.0, 4.0);
  EXPECT_EQ(half_to_float(f16[0]), 0.25f);
  EXPECT_EQ(half_to_float(f16[1]), -0.75f);
  EXPECT_EQ(half_to_float(f16[2]), 250.0f);

  std::vector<std::uint16_t> bf16 = {float_to_bfloat16(3), float_to_bfloat16(-1)};
  scale(bf16.data(), bf16.size(), DataType::kBFloat16, 0.5);
  EXPECT_EQ(bfloat16_to_float(bf16[0]), 1.5f);
  EXPECT_EQ(bfloat16_to_float(bf16[1]), -0.5f);
}

TEST(ScaleTest, BoolAndIdentityScaleLeaveDataUnchanged) {
  std::vector<std::uint8_t> b = {0, 1, 1};
  scale(b.data(), b.size(), DataType::kBool, 0.0, 3.0);
  EXPECT_EQ(b, (std::vector<std::uint8_t>{0, 1, 1}));
  std::vector<float> f = {1.25f, -7.0f};
  scale(f.data(), f.size(), DataType::kFloat32, 1.0, 1.0);
  EXPECT_EQ(f, (std::vector<float>{1.25f, -7.0f}));
}

// scale_into(dst, src) gives the bytes scale() gives in place, for every dtype and for
// identity and non-identity factors, and leaves src as it was.
TEST(ScaleTest, ScaleIntoEqualsCopyThenScaleInPlace) {
  const std::vector<double> values = {0, 1, -2, 3, 100, -7, 12, 5, 9, -1, 64};
  const std::vector<std::pair<double, double>> factors = {{1, 1}, {3, 2}, {0.5, 1}, {1, 3}};
  for (DataType dtype : kolo::testing::kEveryDtype) {
    for (const auto& [factor, divisor] : factors) {
      const std::vector<std::uint8_t> src = encode(dtype, values);
      std::vector<std::uint8_t> expected = src;
      scale(expected.data(), values.size(), dtype, factor, divisor);
      std::vector<std::uint8_t> out(src.size(), 0xAB);
      const std::vector<std::uint8_t> before = src;
      scale_into(out.data(), src.data(), values.size(), dtype, factor, divisor);
      EXPECT_EQ(out, expected) << dtype_name(dtype) << " x" << factor << "/" << divisor;
      EXPECT_EQ(src, before) << dtype_name(dtype);
      std::vector<std::uint8_t> same = src;
      scale_into(same.data(), same.data(), values.size(), dtype, factor, divisor);
      EXPECT_EQ(same, expected) << dtype_name(dtype) << " in place";
    }
  }
}

TEST(HalfTest, KnownBitPatterns) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(float_to_half(1023 * std::ldexp(1.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00);

  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x03ff), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
  EXPECT_EQ(half_to_float(0x8000), 0.0f);
}

TEST(HalfTest, NanStaysNanAndOverflowBecomesInf) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float f : {nan, -nan}) {
    const std::uint16_t h = float_to_half(f);
    EXPECT_EQ(h & 0x7c00, 0x7c00);
    EXPECT_NE(h & 0x03ff, 0) << "NaN became inf";
  }
  // A NaN whose payload lies only in the low bits must not turn into inf.
  std::uint32_t low_payload = 0x7f800001u;
  float snan;
  std::memcpy(&snan, &low_payload, sizeof snan);
  EXPECT_NE(float_to_half(snan) & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_to_float(0xfc01)));

  EXPECT_EQ(float_to_half(70000.0f), 0x7c00);
  EXPECT_EQ(float_to_half(-70000.0f), 0xfc00);
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // midpoint: ties to even (inf)
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::max()), 0x7c00);
}

TEST(HalfTest, RoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -10);                                // float16 spacing at 1
  EXPECT_EQ(float_to_half(1 + ulp / 2), 0x3c00);                          // tie -> even 1.0
  EXPECT_EQ(float_to_half(1 + 3 * ulp / 2), 0x3c02);                      // tie -> 1 + 2^-9
  EXPECT_EQ(float_to_half(1 + ulp / 2 + std::ldexp(1.0f, -20)), 0x3c01);  // above tie
  EXPECT_EQ(float_to_half(1 + ulp / 2 - std::ldexp(1.0f, -20)), 0x3c00);  // below tie
  // Subnormal range: 2^-25 is a tie between 0 and 2^-24, 3 * 2^-25 between 1 and 2 units.
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25) * 1.001f), 0x0001);
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(float_to_half(-3 * std::ldexp(1.0f, -25)), 0x8002);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -30)), 0x0000);
  // Just below the smallest normal rounds up into it.
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
}

TEST(HalfTest, ExhaustiveRoundTrip) {
  int nans = 0;
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
    const float f = half_to_float(h);
    if (is_nan) {
      ++nans;
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << std::hex << i;
      continue;
    }
    ASSERT_EQ(float_to_half(f), h) << std::hex << i << " -> " << f;
  }
  EXPECT_EQ(nans, 2 * 1023);
}

// Between every two adjacent finite float16 values (and 65504 -> 65536), the midpoint rounds
// to the even one and the floats just beside it round to the nearer one.
TEST(HalfTest, ExhaustiveMidpointsRoundToNearestEven) {
  for (std::uint32_t i = 0; i < 0x7c00; ++i) {
    const auto lo = static_cast<std::uint16_t>(i), hi = static_cast<std::uint16_t>(i + 1);
    const float flo = half_to_float(lo);
    const float fhi = hi == 0x7c00 ? 65536.0f : half_to_float(hi);
    const float mid = (flo + fhi) / 2;  // exact: float has 13 more mantissa bits
    const std::uint16_t even = (lo & 1) == 0 ? lo : hi;
    ASSERT_EQ(float_to_half(mid), even) << std::hex << i;
    ASSERT_EQ(float_to_half(-mid), even | 0x8000) << std::hex << i;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 0.0f)), lo) << std::hex << i;
    ASSERT_EQ(float_to_half(std::nextafter(mid, fhi)), hi) << std::hex << i;
  }
}

TEST(BFloat16Test, KnownBitPatternsAndRounding) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(-2.0f), 0xc000);
  EXPECT_EQ(bfloat16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bfloat16_to_float(0xc000), -2.0f);
  const float ulp = std::ldexp(1.0f, -7);                 // bfloat16 spacing at 1
  EXPECT_EQ(float_to_bfloat16(1 + ulp / 2), 0x3f80);      // tie -> even
  EXPECT_EQ(float_to_bfloat16(1 + 3 * ulp / 2), 0x3f82);  // tie -> even
  EXPECT_EQ(float_to_bfloat16(1 + ulp / 2 + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past max
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
  std::uint32_t low_payload = 0x7f800001u;
  float snan;
  std::memcpy(&snan, &low_payload, sizeof snan);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(snan))));
}

TEST(BFloat16Test, ExhaustiveRoundTripAndMidpoints) {
  for (std::uint32_t i = 0; i < 0x10000; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float f = bfloat16_to_float(b);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(f)))) << std::hex << i;
      continue;
    }
    ASSERT_EQ(float_to_bfloat16(f), b) << std::hex << i;
  }
  for (std::uint32_t i = 0; i < 0x7f7f; ++i) {  // adjacent finite positive pairs
    const auto lo = static_cast<std::uint16_t>(i), hi = static_cast<std::uint16_t>(i + 1);
    const float flo = bfloat16_to_float(lo), fhi = bfloat16_to_float(hi);
    const float mid = flo + (fhi - flo) / 2;  // exact, and no overflow near FLT_MAX
    const std::uint16_t even = (lo & 1) == 0 ? lo : hi;
    ASSERT_EQ(float_to_bfloat16(mid), even) << std::hex << i;
    ASSERT_EQ(float_to_bfloat16(std::nextafter(mid, 0.0f)), lo) << std::hex << i;
    ASSERT_EQ(float_to_bfloat16(std::nextafter(mid, fhi)), hi) << std::hex << i;
  }
}

}  // namespace
// fill_identity: op(identity, x) == x for every dtype and op, including the types' extremes
// (bool: 0 and 1); what a joined rank contributes.
TEST(FillIdentityTest, LeavesEveryValueUnchanged) {
  for (DataType dtype : kolo::testing::kEveryDtype) {
    std::vector<double> values = {0, 1, 2, 100};
    if (dtype != DataType::kBool && dtype != DataType::kUInt8) values.push_back(-7);
    if (dtype == DataType::kBool) values = {0, 1};
    if (dtype == DataType::kInt8) values.insert(values.end(), {-128, 127});
    if (dtype == DataType::kUInt8) values.push_back(255);
    if (dtype == DataType::kInt32) values.insert(values.end(), {-2147483648.0, 2147483647.0});
    for (ReduceOp op : kolo::testing::kTransportOps) {
      const std::vector<std::uint8_t> x = encode(dtype, values);
      std::vector<std::uint8_t> id(x.size(), 0xAB);
      fill_identity(id.data(), values.size(), dtype, op);
      std::vector<std::uint8_t> got = id;
      reduce_into(got.data(), x.data(), values.size(), dtype, op);
      EXPECT_EQ(decode(dtype, got), values) << dtype_name(dtype) << " " << reduce_op_name(op);
    }
  }
  std::vector<std::uint8_t> avg(4 * sizeof(float), 0xAB);
  fill_identity(avg.data(), 4, DataType::kFloat32, ReduceOp::kAverage);
  EXPECT_EQ(decode(DataType::kFloat32, avg), std::vector<double>(4, 0.0));
}

}  // namespace kolo
