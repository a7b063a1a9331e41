// reduce_many: the n-way elementwise reduction of common/reduce.h, written to vectorise.
//
// Each call walks the elements in blocks of kBlockBytes of accumulator (it stays in L1):
// acc = load(s0) op load(s1), then acc = acc op load(sk) for the other sources, then
// dst = store(acc). Reading every source of a block before writing dst is what makes
// dst == srcs[k] safe, and the accumulator being a local array lets GCC vectorise every
// pass without runtime alias checks. Full blocks run with a compile-time trip count, so
// even -O2's very-cheap cost model vectorises them. float16 is converted with
// branch-free formulas (selects, no table, no loop) that give the same bits as
// half_to_float/float_to_half; bfloat16 likewise. Signed integer sums and products are
// computed in the unsigned type (wrap-around, no undefined behaviour). On x86-64 CPUs with
// AVX2 and F16C (checked at run time), float16 and bfloat16 use 8-lane intrinsics instead.
//
// Not for: the two-operand reduce_into and scale (reduce.cc), or choosing who reduces
// what (the transports).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "common/reduce.h"

namespace kolo {
namespace {

constexpr std::size_t kBlockBytes = 4096;

// --- element conversions (inlined into the loops) -----------------------------------

inline float fast_half_to_float(std::uint16_t h) {
  const std::uint32_t bits = (static_cast<std::uint32_t>(h) & 0x7fffu) << 13;
  const std::uint32_t exp = bits & 0x0f800000u;  // the half's exponent field, in place
  std::uint32_t r = bits + ((127u - 15u) << 23);
  r += exp == 0x0f800000u ? ((128u - 16u) << 23) : 0u;  // inf/nan: exponent 255
  // Zero/subnormal: give it exponent -14 (the implicit 1 becomes 2^-14), then subtract
  // 2^-14 in float: the difference m * 2^-24 is exact.
  const float normalised = std::bit_cast<float>(r + (1u << 23)) - 6.103515625e-05f;
  r = exp == 0 ? std::bit_cast<std::uint32_t>(normalised) : r;
  return std::bit_cast<float>(r | ((static_cast<std::uint32_t>(h) & 0x8000u) << 16));
}

inline std::uint16_t fast_float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;
  // Normal results: rebias and round the mantissa from 23 to 10 bits, nearest even.
  const std::uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Subnormal results: adding 0.5 (whose ulp is 2^-24, one half subnormal unit) rounds
  // |f| to a whole number of units in the float unit; the low bits are that number.
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  std::uint32_t r = a < 0x38800000u ? sub : normal;
  r = a >= 0x477ff000u ? 0x7c00u : r;  // rounds to >= 65520: inf
  r = a > 0x7f800000u ? 0x7e00u : r;   // nan stays nan
  return static_cast<std::uint16_t>(r | sign);
}

inline float fast_bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t fast_float_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<std::uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// --- the blocked fold ---------------------------------------------------------------

// One block of m elements. Inlined with m == the block size for full blocks.
template <typename T, typename A, typename Load, typename Op, typename Store>
[[gnu::always_inline]] inline void fold_block(T* d, const void* const* srcs, int nsrc,
                                              std::size_t base, std::size_t m, A* acc, Load load,
                                              Op op, Store store) {
  const T* s0 = static_cast<const T*>(srcs[0]) + base;
  if (nsrc == 1) {
    for (std::size_t i = 0; i < m; ++i) acc[i] = load(s0[i]);
  } else {
    const T* s1 = static_cast<const T*>(srcs[1]) + base;
    for (std::size_t i = 0; i < m; ++i) acc[i] = op(load(s0[i]), load(s1[i]));
    for (int k = 2; k < nsrc; ++k) {
      const T* s = static_cast<const T*>(srcs[k]) + base;
      for (std::size_t i = 0; i < m; ++i) acc[i] = op(acc[i], load(s[i]));
    }
  }
  for (std::size_t i = 0; i < m; ++i) d[base + i] = store(acc[i]);
}

// T: element type in memory; A: accumulator type.
template <typename T, typename A, typename Load, typename Op, typename Store>
void fold(void* dst, const void* const* srcs, int nsrc, std::size_t count, Load load, Op op,
          Store store) {
  constexpr std::size_t kB = kBlockBytes / sizeof(A);
  alignas(64) A acc[kB];
  T* d = static_cast<T*>(dst);
  std::size_t base = 0;
  for (; base + kB <= count; base += kB) fold_block(d, srcs, nsrc, base, kB, acc, load, op, store);
  if (base < count) fold_block(d, srcs, nsrc, base, count - base, acc, load, op, store);
}

template <typename T, bool = std::is_integral_v<T>>
struct Wide {
  using type = T;
};
template <typename T>
struct Wide<T, true> {
  using type = std::make_unsigned_t<T>;
};

template <typename A>
struct Same {
  A operator()(A v) const { return v; }
};

// Native types: integers accumulate in their unsigned type for sum/product (defined
// wrap-around, same bits as the signed result); min/max and floats use T itself.
template <typename T>
void reduce_native(void* dst, const void* const* srcs, int nsrc, std::size_t count, ReduceOp op) {
  using W = typename Wide<T>::type;
  auto to_w = [](T v) { return static_cast<W>(v); };
  auto to_t = [](W v) { return static_cast<T>(v); };
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return fold<T, W>(
          dst, srcs, nsrc, count, to_w, [](W a, W b) { return static_cast<W>(a + b); }, to_t);
    case ReduceOp::kProduct:
      return fold<T, W>(
          dst, srcs, nsrc, count, to_w, [](W a, W b) { return static_cast<W>(a * b); }, to_t);
    case ReduceOp::kMin:  // std::min(a, b): b < a ? b : a
      return fold<T, T>(
          dst, srcs, nsrc, count, Same<T>(), [](T a, T b) { return b < a ? b : a; }, Same<T>());
    case ReduceOp::kMax:  // std::max(a, b): a < b ? b : a
      return fold<T, T>(
          dst, srcs, nsrc, count, Same<T>(), [](T a, T b) { return a < b ? b : a; }, Same<T>());
  }
}

template <typename Load, typename Store>
void reduce_16(void* dst, const void* const* srcs, int nsrc, std::size_t count, ReduceOp op,
               Load load, Store store) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return fold<std::uint16_t, float>(
          dst, srcs, nsrc, count, load, [](float a, float b) { return a + b; }, store);
    case ReduceOp::kProduct:
      return fold<std::uint16_t, float>(
          dst, srcs, nsrc, count, load, [](float a, float b) { return a * b; }, store);
    case ReduceOp::kMin:
      return fold<std::uint16_t, float>(
          dst, srcs, nsrc, count, load, [](float a, float b) { return b < a ? b : a; }, store);
    case ReduceOp::kMax:
      return fold<std::uint16_t, float>(
          dst, srcs, nsrc, count, load, [](float a, float b) { return a < b ? b : a; }, store);
  }
}

// Bool bytes: or = any non-zero, and = all non-zero; results are 0 or 1.
void reduce_bool(void* dst, const void* const* srcs, int nsrc, std::size_t count, ReduceOp op) {
  using U = std::uint8_t;
  auto nonzero = [](U v) { return static_cast<U>(v != 0); };
  if (op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kAverage) {
    return fold<U, U>(
        dst, srcs, nsrc, count, Same<U>(), [](U a, U b) { return static_cast<U>(a | b); }, nonzero);
  }
  fold<U, U>(
      dst, srcs, nsrc, count, nonzero, [](U a, U b) { return static_cast<U>(a & b); }, Same<U>());
}

#if defined(__x86_64__)
// float16 and bfloat16 with AVX2 and F16C, 8 lanes at a time: vcvtph2ps/vcvtps2ph for
// float16; for bfloat16 the same shift/round/NaN formulas as the portable path, in vector
// registers. Same results as the portable path, except that a float16 NaN keeps more of
// its payload.
#define KOLO_SIMD [[gnu::target("avx2,f16c")]]

template <int kOp>  // 0 sum, 1 product, 2 min, 3 max
KOLO_SIMD inline __m256 op8(__m256 acc, __m256 s) {
  if constexpr (kOp == 0) return _mm256_add_ps(acc, s);
  if constexpr (kOp == 1) return _mm256_mul_ps(acc, s);
  if constexpr (kOp == 2) return _mm256_min_ps(s, acc);  // s < acc ? s : acc, as std::min
  return _mm256_max_ps(s, acc);                          // s > acc ? s : acc, as std::max
}

// kKind: 0 float16, 1 bfloat16, 2 float32.
template <int kKind>
KOLO_SIMD inline __m256 load8(const void* p, std::size_t i) {
  if constexpr (kKind == 2) return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  const __m128i h =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i));
  if constexpr (kKind == 1)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

template <int kKind>
KOLO_SIMD inline void store8(void* p, std::size_t i, __m256 v) {
  if constexpr (kKind == 2) {
    _mm256_storeu_ps(static_cast<float*>(p) + i, v);
    return;
  }
  __m128i out;
  if constexpr (kKind == 1) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i high = _mm256_srli_epi32(x, 16);
    const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // Pack 8 x 32 to 8 x 16 bits (packus works per 128-bit lane; reorder the quadwords).
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    out = _mm256_castsi256_si128(packed);
  } else {
    out = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(p) + i), out);
}

// One pass: every source of 8 elements is read before those 8 of dst are written (so dst
// may be a source), and nothing goes through an accumulator in memory.
template <int kKind, int kOp>
KOLO_SIMD std::size_t fold_simd(void* dst, const void* const* srcs, int nsrc, std::size_t count) {
  std::size_t i = 0;
  if (nsrc == 2) {  // the common case: two ranks
    const void* a = srcs[0];
    const void* b = srcs[1];
    for (; i + 8 <= count; i += 8)
      store8<kKind>(dst, i, op8<kOp>(load8<kKind>(a, i), load8<kKind>(b, i)));
    return i;
  }
  for (; i + 8 <= count; i += 8) {
    __m256 acc = load8<kKind>(srcs[0], i);
    for (int k = 1; k < nsrc; ++k) acc = op8<kOp>(acc, load8<kKind>(srcs[k], i));
    store8<kKind>(dst, i, acc);
  }
  return i;
}

template <int kKind>
std::size_t reduce_simd(void* dst, const void* const* srcs, int nsrc, std::size_t count,
                        ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return fold_simd<kKind, 0>(dst, srcs, nsrc, count);
    case ReduceOp::kProduct:
      return fold_simd<kKind, 1>(dst, srcs, nsrc, count);
    case ReduceOp::kMin:
      return fold_simd<kKind, 2>(dst, srcs, nsrc, count);
    case ReduceOp::kMax:
      return fold_simd<kKind, 3>(dst, srcs, nsrc, count);
  }
  return 0;
}

// Elements done with AVX2/F16C (a multiple of 8), or 0 when the CPU lacks them or the
// dtype has no such path.
// F16C is CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports has no "f16c").
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
}

std::size_t reduce_hardware(void* dst, const void* const* srcs, int nsrc, std::size_t count,
                            DataType dtype, ReduceOp op) {
  static const bool kHave = __builtin_cpu_supports("avx2") && cpu_has_f16c();
  if (!kHave) return 0;
  switch (dtype) {
    case DataType::kFloat16:
      return reduce_simd<0>(dst, srcs, nsrc, count, op);
    case DataType::kBFloat16:
      return reduce_simd<1>(dst, srcs, nsrc, count, op);
    case DataType::kFloat32:
      return reduce_simd<2>(dst, srcs, nsrc, count, op);
    default:
      return 0;
  }
}
#undef KOLO_SIMD
#else
std::size_t reduce_hardware(void*, const void* const*, int, std::size_t, DataType, ReduceOp) {
  return 0;
}
#endif

}  // namespace

void reduce_many_portable(void* dst, const void* const* srcs, int nsrc, std::size_t count,
                          DataType dtype, ReduceOp op) {
  if (nsrc <= 0 || count == 0) return;
  if (nsrc == 1) {
    if (dst != srcs[0]) std::memcpy(dst, srcs[0], count * dtype_size(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kFloat32:
      return reduce_native<float>(dst, srcs, nsrc, count, op);
    case DataType::kFloat64:
      return reduce_native<double>(dst, srcs, nsrc, count, op);
    case DataType::kFloat16:
      return reduce_16(
          dst, srcs, nsrc, count, op, [](std::uint16_t h) { return fast_half_to_float(h); },
          [](float f) { return fast_float_to_half(f); });
    case DataType::kBFloat16:
      return reduce_16(
          dst, srcs, nsrc, count, op, [](std::uint16_t b) { return fast_bf16_to_float(b); },
          [](float f) { return fast_float_to_bf16(f); });
    case DataType::kInt8:
      return reduce_native<std::int8_t>(dst, srcs, nsrc, count, op);
    case DataType::kUInt8:
      return reduce_native<std::uint8_t>(dst, srcs, nsrc, count, op);
    case DataType::kInt32:
      return reduce_native<std::int32_t>(dst, srcs, nsrc, count, op);
    case DataType::kInt64:
      return reduce_native<std::int64_t>(dst, srcs, nsrc, count, op);
    case DataType::kBool:
      return reduce_bool(dst, srcs, nsrc, count, op);
  }
}

void reduce_many(void* dst, const void* const* srcs, int nsrc, std::size_t count, DataType dtype,
                 ReduceOp op) {
  if (nsrc >= 2 && count >= 8) {
    const std::size_t done = reduce_hardware(dst, srcs, nsrc, count, dtype, op);
    if (done > 0) {
      if (done == count) return;
      const void* rest[64];
      std::vector<const void*> many;
      const void** tail = rest;
      if (nsrc > 64) {
        many.resize(static_cast<std::size_t>(nsrc));
        tail = many.data();
      }
      const std::size_t skip = done * dtype_size(dtype);
      for (int k = 0; k < nsrc; ++k) tail[k] = static_cast<const char*>(srcs[k]) + skip;
      return reduce_many_portable(static_cast<char*>(dst) + skip, tail, nsrc, count - done, dtype,
                                  op);
    }
  }
  reduce_many_portable(dst, srcs, nsrc, count, dtype, op);
}

}  // namespace kolo
