// Helpers shared by kolo_bench's subcommands (see bench_util.h).
#include "kolo_bench/bench_util.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace kolo_bench {

namespace {

struct DtypeName {
  const char* name;
  kolo::DataType dtype;
};

constexpr DtypeName kDtypes[] = {
    {"f32", kolo::DataType::kFloat32},   {"f16", kolo::DataType::kFloat16},
    {"bf16", kolo::DataType::kBFloat16}, {"f64", kolo::DataType::kFloat64},
    {"i32", kolo::DataType::kInt32},     {"i64", kolo::DataType::kInt64},
    {"i8", kolo::DataType::kInt8},       {"u8", kolo::DataType::kUInt8},
};

// IEEE binary16 <-> float for the small integers the result check uses (normal numbers
// only; subnormals and NaN payloads are never produced here).
std::uint16_t to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  const std::uint32_t mant = (x >> 13) & 0x3ffu;
  if (f == 0.0f) return static_cast<std::uint16_t>(sign);
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp) << 10) | mant);
}

float from_half(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1f;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t x = sign;
  if (exp == 0x1f) {
    x |= 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    x |= ((exp - 15 + 127) << 23) | (mant << 13);
  } else if (mant != 0) {  // subnormal: value = mant * 2^-24
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

template <typename T>
void fill_as(void* data, std::int64_t count, T value) {
  std::fill_n(static_cast<T*>(data), count, value);
}

}  // namespace

Stats summarize(std::vector<double> samples) {
  Stats s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  // Nearest-rank percentiles on the sorted sample; the median averages the middle pair.
  auto at = [&](double q) {
    const std::size_t i = static_cast<std::size_t>(std::lround(q * (samples.size() - 1)));
    return samples[i];
  };
  const std::size_t n = samples.size();
  s.median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  s.p10 = at(0.1);
  s.p90 = at(0.9);
  s.min = samples.front();
  s.max = samples.back();
  return s;
}

std::vector<double> max_over_ranks(const std::vector<double>& local, const std::string& name) {
  std::vector<double> out = local;
  if (out.empty()) return out;
  kolo::TensorView v =
      view_of(out.data(), kolo::DataType::kFloat64, static_cast<std::int64_t>(out.size()));
  kolo::allreduce(v, v, {.name = name, .op = kolo::ReduceOp::kMax});
  return out;
}

kolo::TensorView view_of(void* data, kolo::DataType dtype, std::int64_t count) {
  kolo::TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape = {count};
  return v;
}

bool parse_dtype(const std::string& text, kolo::DataType* out) {
  for (const auto& d : kDtypes) {
    if (text == d.name) {
      *out = d.dtype;
      return true;
    }
  }
  return false;
}

const char* short_dtype_name(kolo::DataType dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return kolo::dtype_name(dtype);
}

std::vector<std::string> dtype_choices() {
  std::vector<std::string> names;
  for (const auto& d : kDtypes) names.emplace_back(d.name);
  return names;
}

void fill(void* data, kolo::DataType dtype, std::int64_t count, double value) {
  using kolo::DataType;
  switch (dtype) {
    case DataType::kFloat32:
      fill_as<float>(data, count, static_cast<float>(value));
      break;
    case DataType::kFloat64:
      fill_as<double>(data, count, value);
      break;
    case DataType::kFloat16:
      fill_as<std::uint16_t>(data, count, to_half(static_cast<float>(value)));
      break;
    case DataType::kBFloat16: {
      const float f = static_cast<float>(value);
      std::uint32_t x;
      std::memcpy(&x, &f, 4);
      fill_as<std::uint16_t>(data, count, static_cast<std::uint16_t>(x >> 16));
      break;
    }
    case DataType::kInt8:
      fill_as<std::int8_t>(data, count, static_cast<std::int8_t>(value));
      break;
    case DataType::kUInt8:
      fill_as<std::uint8_t>(data, count, static_cast<std::uint8_t>(value));
      break;
    case DataType::kInt32:
      fill_as<std::int32_t>(data, count, static_cast<std::int32_t>(value));
      break;
    case DataType::kInt64:
      fill_as<std::int64_t>(data, count, static_cast<std::int64_t>(value));
      break;
    case DataType::kBool:
      fill_as<std::uint8_t>(data, count, value != 0);
      break;
  }
}

double element(const void* data, kolo::DataType dtype, std::int64_t i) {
  using kolo::DataType;
  switch (dtype) {
    case DataType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(data)[i];
    case DataType::kFloat16:
      return from_half(static_cast<const std::uint16_t*>(data)[i]);
    case DataType::kBFloat16: {
      const std::uint32_t x = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(data)[i])
                              << 16;
      float f;
      std::memcpy(&f, &x, 4);
      return f;
    }
    case DataType::kInt8:
      return static_cast<const std::int8_t*>(data)[i];
    case DataType::kUInt8:
      return static_cast<const std::uint8_t*>(data)[i];
    case DataType::kInt32:
      return static_cast<const std::int32_t*>(data)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const std::int64_t*>(data)[i]);
    case DataType::kBool:
      return static_cast<const std::uint8_t*>(data)[i];
  }
  return 0;
}

std::int64_t peak_rss_kib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;  // KiB on Linux
}

std::vector<std::int64_t> report_peak_rss() {
  std::int64_t mine = peak_rss_kib();
  kolo::Tensor all =
      kolo::allgather(view_of(&mine, kolo::DataType::kInt64, 1), {.name = "bench.peak_rss"});
  std::vector<std::int64_t> out(all.data_as<std::int64_t>(),
                                all.data_as<std::int64_t>() + all.numel());
  if (kolo::rank() == 0) {
    for (std::size_t r = 0; r < out.size(); ++r) {
      std::printf("peak RSS rank %zu: %.1f MiB\n", r, static_cast<double>(out[r]) / 1024.0);
    }
    std::fflush(stdout);
  }
  return out;
}

void write_json(const std::string& path, const nlohmann::json& value) {
  std::ofstream f(path);
  f << value.dump(2) << "\n";
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace kolo_bench
