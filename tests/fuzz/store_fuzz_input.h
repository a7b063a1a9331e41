// The input layout shared by the TCP store's fuzz targets (store_wire_fuzz.cc,
// store_server_fuzz.cc) and their seed writer (store_seeds.cc), so one corpus
// (tests/fuzz/corpus/store_wire) feeds both. Not for: anything outside tests/fuzz.
//
// Byte 0 holds flags: bits 0-2 the number of cuts (0-7), bit 3 "the server target sends a
// correct hello before the stream", bit 4 "the server target's server has no secret".
// Then each cut is a 2-byte little-endian piece length; the rest of the input is the
// stream of bytes a client sends. The stream is fed in pieces of those lengths (as
// separate reads on the server's side), and whatever is left after the last one in one
// piece. The wire target ignores bits 3 and 4.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kolo::fuzz {

// The job secret of the server target's server (with bit 4 clear).
inline const std::string kStoreFuzzSecret("fuzz-secret\0\xfe", 13);

struct StoreFuzzInput {
  std::vector<std::size_t> cuts;  // lengths of the first pieces of `stream`
  bool hello = false;             // server target: a correct hello goes first
  bool no_secret = false;         // server target: the server runs without a secret
  std::string stream;
};

inline StoreFuzzInput parse_store_fuzz_input(const std::uint8_t* data, std::size_t size) {
  StoreFuzzInput in;
  if (size == 0) return in;
  const std::size_t ncuts = data[0] & 7;
  in.hello = (data[0] & 8) != 0;
  in.no_secret = (data[0] & 16) != 0;
  std::size_t at = 1;
  for (std::size_t i = 0; i < ncuts && at + 2 <= size; ++i, at += 2) {
    in.cuts.push_back(data[at] | (std::size_t{data[at + 1]} << 8));
  }
  in.stream.assign(reinterpret_cast<const char*>(data + at), size - at);
  return in;
}

inline std::string make_store_fuzz_input(const StoreFuzzInput& in) {
  std::string out(
      1, static_cast<char>((in.cuts.size() & 7) | (in.hello ? 8 : 0) | (in.no_secret ? 16 : 0)));
  for (std::size_t i = 0; i < in.cuts.size() && i < 7; ++i) {
    out += static_cast<char>(in.cuts[i] & 0xff);
    out += static_cast<char>((in.cuts[i] >> 8) & 0xff);
  }
  return out + in.stream;
}

// The stream cut as the input says: the pieces, then the rest (empty pieces kept).
inline std::vector<std::string> pieces_of(const StoreFuzzInput& in) {
  std::vector<std::string> pieces;
  std::size_t at = 0;
  for (const std::size_t n : in.cuts) {
    const std::size_t len = std::min(n, in.stream.size() - at);
    pieces.push_back(in.stream.substr(at, len));
    at += len;
  }
  pieces.push_back(in.stream.substr(at));
  return pieces;
}

}  // namespace kolo::fuzz
