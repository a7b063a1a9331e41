// The bytes of one RPC message (rpc.h) on the wire: a header frame, then one frame per
// blob. Pure encoding and checked decoding, no sockets, so every rule is tested alone
// (wire_test.cc) and fuzzed.
//
// Header frame, little-endian:
//   u32 magic "KPS1"   u16 version (1)   u8 kind (1 request, 2 reply)   u8 code (replies)
//   u64 request id     i64 deadline left in ms (requests)
//   u16 + bytes  method (requests)       u32 + bytes  error message (replies)
//   u32 number of blob frames that follow
//   u32 number of fields, then each: u16 + bytes key, u8 type (1 int64, 2 double,
//   3 string), the value (8 bytes, or u32 + bytes)
// Every length and count is checked against the bytes left before anything is made for
// it, and against the limits below; a field key may appear once; nothing may trail.
//
// Not for: sockets, threads, authentication (rpc.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ps/rpc.h"

namespace kolo::ps {

inline constexpr std::uint32_t kWireMagic = 0x3153504B;  // "KPS1" in little-endian order
inline constexpr std::uint16_t kWireVersion = 1;
inline constexpr std::size_t kMaxMethodBytes = 128;
inline constexpr std::size_t kMaxKeyBytes = 256;
inline constexpr std::size_t kMaxStringFieldBytes = std::size_t{1} << 20;  // 1 MiB
inline constexpr std::size_t kMaxErrorBytes = std::size_t{64} << 10;       // 64 KiB
inline constexpr std::uint32_t kMaxFields = 1u << 16;
inline constexpr std::uint32_t kMaxBlobs = 1u << 16;
inline constexpr std::size_t kMaxHeaderBytes = std::size_t{32} << 20;  // 32 MiB

enum class WireKind : std::uint8_t { kRequest = 1, kReply = 2 };

// What the header frame says besides the fields.
struct WireHeader {
  WireKind kind = WireKind::kRequest;
  std::uint64_t request_id = 0;
  std::int64_t deadline_ms = 0;     // requests: the time the caller has left
  ErrorCode code = ErrorCode::kOk;  // replies
  std::string error;                // replies: the handler's message when code is not kOk
  std::string method;               // requests
  std::uint32_t num_blobs = 0;
};

struct WireCodec {
  // The header frame of `message` (method taken from `header`, not from the message).
  static std::string encode(const WireHeader& header, const Fields& fields);
  // Decodes a header frame; kInvalidArgument saying what is wrong (a bad magic, a length
  // past the end, a limit, an unknown type, a repeated key, trailing bytes).
  static Status decode(std::string_view frame, WireHeader* header, Fields* fields);
};

// Decodes a whole message from its frames (header, then blobs): the header's blob count
// must match the frames, and their total size must be at most `max_bytes`.
Status decode_message(const std::vector<std::string_view>& frames, std::size_t max_bytes,
                      WireHeader* header, Message* message);

// The PLAIN password for `secret`: the secret after a fixed byte, because libzmq refuses
// an empty password and a job may have no secret.
inline std::string plain_password(const std::string& secret) { return "k" + secret; }

// The bytes a message takes on the wire (header frame plus blobs): what bytes_sent and
// bytes_received count.
std::size_t wire_bytes(const Message& message);

}  // namespace kolo::ps
