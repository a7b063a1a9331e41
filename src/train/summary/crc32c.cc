// CRC-32C (Castagnoli), the checksum of TFRecord framing, and TFRecord's mask of it.
// Table-driven, a byte at a time: event files are small (a few records per epoch), so
// the hardware instruction (SSE 4.2 crc32) is not worth a CPU dispatch here.
//
// Not for: checkpoints (src/torch/checkpoint.cc uses zlib's CRC-32, another polynomial).
#include <array>
#include <cstdint>

#include "kolo/train/summary.h"

namespace kolo::train {
namespace {

// Reflected polynomial 0x1EDC6F41, as RFC 3720 (iSCSI) and TensorFlow's crc32c.h use.
constexpr std::uint32_t kPolynomial = 0x82F63B78;

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    table[i] = crc;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kTable = make_table();
static_assert(kTable[1] == 0xF26B8303, "CRC-32C table");

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t crc = 0xFFFFFFFF;
  for (std::size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFF;
}

// "Rotate right by 15 bits and add a constant" (TensorFlow's crc32c::Mask): a CRC of
// data that itself holds CRCs is then not trivially related to them.
std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  const std::uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

}  // namespace kolo::train
