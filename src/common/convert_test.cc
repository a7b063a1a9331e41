// convert_scaled(): float32/float64 <-> float16/bfloat16 with scaling, against the scalar
// conversions of reduce.h.
#include "common/convert.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "common/reduce.h"

namespace kolo {
namespace {

TEST(ConvertTest, WireDtypeOnlyNarrowsWideFloats) {
  EXPECT_EQ(wire_dtype(DataType::kFloat32, Compression::kFP16), DataType::kFloat16);
  EXPECT_EQ(wire_dtype(DataType::kFloat64, Compression::kBF16), DataType::kBFloat16);
  EXPECT_EQ(wire_dtype(DataType::kFloat32, Compression::kNone), DataType::kFloat32);
  EXPECT_EQ(wire_dtype(DataType::kInt32, Compression::kFP16), DataType::kInt32);
  EXPECT_EQ(wire_dtype(DataType::kFloat16, Compression::kBF16), DataType::kFloat16);
  EXPECT_TRUE(can_convert(DataType::kFloat64, DataType::kFloat16));
  EXPECT_FALSE(can_convert(DataType::kInt32, DataType::kFloat16));
}

TEST(ConvertTest, RoundTripsWithScalingMatchTheScalarConversions) {
  std::vector<float> src = {0.0f, 1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f, 1e6f, -0.0f};
  for (DataType wire : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<std::uint16_t> packed(src.size());
    convert_scaled(src.data(), DataType::kFloat32, packed.data(), wire, src.size(), 0.5);
    for (std::size_t i = 0; i < src.size(); ++i) {
      const std::uint16_t want = wire == DataType::kFloat16 ? float_to_half(src[i] * 0.5f)
                                                            : float_to_bfloat16(src[i] * 0.5f);
      EXPECT_EQ(packed[i], want) << dtype_name(wire) << " element " << i;
    }
    std::vector<double> back(src.size());
    convert_scaled(packed.data(), wire, back.data(), DataType::kFloat64, src.size(), 3.0, 2.0);
    for (std::size_t i = 0; i < src.size(); ++i) {
      const float narrow =
          wire == DataType::kFloat16 ? half_to_float(packed[i]) : bfloat16_to_float(packed[i]);
      EXPECT_DOUBLE_EQ(back[i], static_cast<double>(narrow) * 1.5) << i;
    }
  }
  // 1e6 overflows float16 to infinity; bfloat16 keeps it.
  std::uint16_t h;
  convert_scaled(&src[6], DataType::kFloat32, &h, DataType::kFloat16, 1);
  EXPECT_TRUE(std::isinf(half_to_float(h)));
}

TEST(ConvertTest, SameDtypeCopiesAndScales) {
  std::vector<std::int32_t> a = {10, -7, 3}, b(3);
  convert_scaled(a.data(), DataType::kInt32, b.data(), DataType::kInt32, 3, 1.0, 2.0);
  EXPECT_EQ(b, (std::vector<std::int32_t>{5, -3, 1}));  // truncation toward zero, like scale()
}

}  // namespace
}  // namespace kolo
