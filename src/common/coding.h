// One bounded byte codec for every format kolo writes: the control plane's messages
// (core/message.cc), the TCP store's frames (rendezvous/tcp_store_wire.cc), the
// parameter-server rpc header (ps/wire.cc), parameter-server checkpoints
// (train/ps_checkpoint.cc) and TensorBoard's protobuf events (train/event_encoding.cc).
//
// Writing appends to a std::string: fixed-width integers, enums and floating-point values
// little-endian in their own size, LEB128 varints, and byte strings after a 16-, 32- or
// 64-bit length. Reading (ByteReader) never passes the end: every read says whether the
// bytes were there and moves on only when they were, and a string's length is checked
// against what is left (and the caller's limit) before anything is allocated for it.
// The byte order is written out, so the formats do not depend on the machine's.
//
// Not for: what the bytes mean (each format's own file), framing on sockets, or messages
// for users (the callers say which field of which message was cut short).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

namespace kolo::coding {

namespace detail {
// The unsigned integer of T's size that holds its bits.
template <typename T>
auto to_bits(T v) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<std::make_unsigned_t<std::underlying_type_t<T>>>(v);
  } else if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<std::uint64_t>(v);
  } else if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<std::uint32_t>(v);
  } else {
    static_assert(std::is_integral_v<T>, "fixed-width values are integers, enums or floats");
    return static_cast<std::make_unsigned_t<T>>(v);
  }
}
template <typename T>
T from_bits(std::uint64_t bits) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<T>(static_cast<std::underlying_type_t<T>>(bits));
  } else if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<double>(bits);
  } else if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
  } else {
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(bits));
  }
}
}  // namespace detail

// The `bytes` lowest bytes of `v`, little-endian.
inline void put_fixed(std::string* out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// `v` in sizeof(T) bytes, little-endian (bool: one byte, 0 or 1).
template <typename T>
void put(std::string* out, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    out->push_back(v ? 1 : 0);
  } else {
    put_fixed(out, detail::to_bits(v), sizeof(T));
  }
}

// An unsigned LEB128 varint (protobuf's): 7 bits a byte, low bits first.
inline void put_varint(std::string* out, std::uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// `s` after its length as a Len (std::uint16_t, std::uint32_t or std::uint64_t). The caller
// keeps `s` within Len (the formats cap their strings before they write them).
template <typename Len>
void put_bytes(std::string* out, std::string_view s) {
  put(out, static_cast<Len>(s.size()));
  out->append(s);
}

class ByteReader {
 public:
  // Reads `in`, which must outlive the reader (a temporary string may not: refused).
  explicit ByteReader(std::string_view in) : in_(in) {}
  explicit ByteReader(std::string&&) = delete;

  std::size_t left() const { return in_.size() - pos_; }
  std::size_t position() const { return pos_; }
  bool done() const { return pos_ == in_.size(); }

  // `bytes` bytes, little-endian, into the low bits of *v.
  bool get_fixed(int bytes, std::uint64_t* v) {
    if (left() < static_cast<std::size_t>(bytes)) return false;
    std::uint64_t r = 0;
    for (int i = 0; i < bytes; ++i) {
      r |= std::uint64_t{static_cast<unsigned char>(in_[pos_ + i])} << (8 * i);
    }
    pos_ += static_cast<std::size_t>(bytes);
    *v = r;
    return true;
  }

  // What put() wrote. A bool is false for anything but 0 and 1 (the reader stays past it).
  template <typename T>
  bool get(T* v) {
    std::uint64_t bits = 0;
    if (!get_fixed(sizeof(T), &bits)) return false;
    if constexpr (std::is_same_v<T, bool>) {
      *v = bits == 1;
      return bits <= 1;
    } else {
      *v = detail::from_bits<T>(bits);
      return true;
    }
  }

  // A varint of at most 10 bytes (64 bits).
  bool get_varint(std::uint64_t* v) {
    std::uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (left() == 0) return false;
      const auto b = static_cast<unsigned char>(in_[pos_++]);
      r |= std::uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) {
        *v = r;
        return true;
      }
    }
    return false;
  }

  // The next `n` bytes, if there are that many.
  bool take(std::size_t n, std::string_view* s) {
    if (left() < n) return false;
    *s = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  // What put_bytes<Len> wrote, of at most `limit` bytes. On failure nothing is allocated:
  // the length is checked against `limit` and against what is left first.
  template <typename Len>
  bool get_bytes(std::size_t limit, std::string* s) {
    Len n = 0;
    if (!get(&n)) return false;
    std::string_view v;
    if (static_cast<std::uint64_t>(n) > limit || !take(static_cast<std::size_t>(n), &v)) {
      return false;
    }
    s->assign(v);
    return true;
  }

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
};

}  // namespace kolo::coding
