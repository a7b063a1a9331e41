// The TCP store's wire format: pure encoding and decoding, no sockets, so it is tested
// and fuzzed on its own (tcp_store_wire_test.cc). Not for: I/O (tcp_store_server.cc,
// tcp_store.cc) or the meaning of each operation (store.h).
//
// A frame is a 4-byte little-endian body length, then the body:
//   magic 'K' 'S', version (1), op (Op), then the fields of Message in the order kFields
//   lists them: code (u8), flag (u8), number (i64 LE), keys (u32 count, then each as
//   u32 length + bytes), value and detail (each u32 length + bytes).
// Every op uses the same fields (unused ones are zero or empty), so one list drives
// encoding, decoding and equality. Limits: a body of at most kMaxFrameBytes, keys of at
// most kMaxKeyBytes, at most kMaxKeys keys; anything else, and trailing bytes, is
// malformed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kolo::rendezvous::wire {

constexpr std::uint8_t kMagic0 = 'K', kMagic1 = 'S', kVersion = 1;
constexpr std::size_t kMaxFrameBytes = std::size_t{64} << 20;
constexpr std::size_t kMaxKeyBytes = 4096;
constexpr std::size_t kMaxKeys = 65536;
constexpr std::size_t kLengthBytes = 4;
// A connection may send at most this much before its hello is accepted, so a stranger
// cannot make the server buffer a 64 MiB frame.
constexpr std::size_t kMaxHelloBytes = std::size_t{64} << 10;
// The longest job secret: a hello (its value, with the fixed fields) fits kMaxHelloBytes.
constexpr std::size_t kMaxSecretBytes = kMaxHelloBytes - 1024;

enum class Op : std::uint8_t {
  kHello = 1,   // value: the job secret; the first frame of every connection
  kSet,         // keys[0], value
  kGet,         // keys[0]; number: how long the client waits (ns, saturated)
  kTryGet,      // keys[0]
  kCheck,       // keys
  kAdd,         // keys[0]; number: delta
  kCompareSet,  // keys[0]; value: expected; detail: desired
  kWait,        // keys; number: how long the client waits (ns)
  kErase,       // keys[0]
  kReply,       // code: ErrorCode; flag: found/all/existed; number: add's result;
                // value: get's value or compare_set's actual; detail: the error message;
                // keys: for a wait that ran out, the keys still missing
};
constexpr std::uint8_t kLastOp = static_cast<std::uint8_t>(Op::kReply);

struct Message {
  Op op = Op::kReply;
  std::uint8_t code = 0;
  std::uint8_t flag = 0;
  std::int64_t number = 0;
  std::vector<std::string> keys;
  std::string value;
  std::string detail;

  bool operator==(const Message&) const = default;
};

// What an op is called in logs: "get", "hello", ... ("op 77" for one not known).
std::string op_name(Op op);

// The whole frame (length prefix and body). kInvalidArgument when the message breaks a
// limit (the sender checks, so a peer never sees a frame it must refuse).
Status encode(const Message& m, std::string* frame);

// Takes every complete frame off the front of *buffer (bytes as read from a socket) into
// *out, leaving a partial frame in place. kInvalidArgument, saying what is wrong, at the
// first bad frame (its length over the limit, a wrong magic or version, an unknown op, a
// field past the end or over its limit, trailing bytes); then the connection must close.
Status extract(std::string* buffer, std::vector<Message>* out);

}  // namespace kolo::rendezvous::wire
