#include "common/convert.h"

#include <cstdint>
#include <cstring>

#include "common/reduce.h"

namespace kolo {
namespace {

bool wide(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64; }
bool narrow(DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; }

template <typename Wide>
void narrow_from(const Wide* src, std::uint16_t* dst, std::size_t n, DataType to, double f) {
  const bool half = to == DataType::kFloat16;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(static_cast<double>(src[i]) * f);
    dst[i] = half ? float_to_half(v) : float_to_bfloat16(v);
  }
}

template <typename Wide>
void widen_to(const std::uint16_t* src, Wide* dst, std::size_t n, DataType from, double f) {
  const bool half = from == DataType::kFloat16;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = half ? half_to_float(src[i]) : bfloat16_to_float(src[i]);
    dst[i] = static_cast<Wide>(static_cast<double>(v) * f);
  }
}

}  // namespace

bool can_convert(DataType from, DataType to) {
  return from == to || (wide(from) && narrow(to)) || (narrow(from) && wide(to));
}

DataType wire_dtype(DataType dtype, Compression compression) {
  if (!wide(dtype)) return dtype;
  switch (compression) {
    case Compression::kFP16:
      return DataType::kFloat16;
    case Compression::kBF16:
      return DataType::kBFloat16;
    case Compression::kNone:
      return dtype;
  }
  return dtype;
}

void convert_scaled(const void* src, DataType from, void* dst, DataType to, std::size_t count,
                    double factor, double divisor) {
  if (from == to) {
    scale_into(dst, src, count, to, factor, divisor);
    return;
  }
  const double f = factor / divisor;
  if (narrow(to)) {
    auto* out = static_cast<std::uint16_t*>(dst);
    if (from == DataType::kFloat32)
      narrow_from(static_cast<const float*>(src), out, count, to, f);
    else
      narrow_from(static_cast<const double*>(src), out, count, to, f);
  } else {
    const auto* in = static_cast<const std::uint16_t*>(src);
    if (to == DataType::kFloat32)
      widen_to(in, static_cast<float*>(dst), count, from, f);
    else
      widen_to(in, static_cast<double*>(dst), count, from, f);
  }
}

}  // namespace kolo
