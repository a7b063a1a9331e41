// Fuzz target: the TCP store's frame parser (src/rendezvous/tcp_store_wire.h) on any bytes,
// fed the way the server reads a socket: in pieces, with wire::extract called after each
// one on what has arrived (store_fuzz_input.h says where the input puts the cuts). Checks:
//   - pieces or all at once: the same messages, the same error or none (and, without one,
//     the same bytes left);
//   - every message it accepts respects the limits, encodes, and its encoding is the very
//     bytes it was decoded from (one encoding per message) and decodes back to it;
//   - what it leaves behind after a clean call is a partial frame under the limit (an
//     oversized length is refused from its 4 bytes, before any body arrives);
//   - an error is kInvalidArgument with the "malformed TCP store frame" message.
// Any crash, sanitizer report or failed check is a bug. Built with clang's
// -fsanitize=fuzzer by scripts/fuzz.sh, and with replay.cc's main everywhere else
// (ctest fuzz.store_wire_corpus). Not for: what the server does with the messages
// (store_server_fuzz.cc).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rendezvous/tcp_store_wire.h"
#include "store_fuzz_input.h"

namespace {

namespace wire = kolo::rendezvous::wire;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "store_wire_fuzz: %s\n", what);
    std::abort();
  }
}

std::size_t length_at_front(const std::string& buffer) {
  std::size_t n = 0;
  for (int i = 0; i < 4; ++i) n |= std::size_t{static_cast<unsigned char>(buffer[i])} << (8 * i);
  return n;
}

// What a clean extract() may leave: fewer than 4 bytes, or a frame under the limit whose
// body has not all arrived.
bool only_a_partial_frame(const std::string& buffer) {
  if (buffer.size() < wire::kLengthBytes) return true;
  const std::size_t n = length_at_front(buffer);
  return n <= wire::kMaxFrameBytes && buffer.size() - wire::kLengthBytes < n;
}

struct Parse {
  std::vector<wire::Message> messages;
  std::vector<std::string> frames;  // the bytes each message came from
  kolo::Status status;
  std::string left;
};

// Feeds the pieces one by one, as reads from a socket, stopping at the first error (the
// server closes the connection there).
Parse parse(const std::vector<std::string>& pieces) {
  Parse p;
  std::string seen;  // every byte fed so far, to cut out each message's frame
  std::size_t consumed = 0;
  for (const auto& piece : pieces) {
    p.left += piece;
    seen += piece;
    const std::size_t before = p.messages.size();
    const std::size_t had = p.left.size();
    p.status = wire::extract(&p.left, &p.messages);
    check(p.left.size() <= had, "extract grew its buffer");
    check(had - p.left.size() == 0 || p.messages.size() > before,
          "extract consumed bytes without a message");
    // The frames taken off this time lie back to back from `consumed`.
    std::size_t at = consumed;
    for (std::size_t i = before; i < p.messages.size(); ++i) {
      check(seen.size() - at >= wire::kLengthBytes, "a message from under 4 bytes");
      const std::size_t n = length_at_front(seen.substr(at, wire::kLengthBytes));
      p.frames.push_back(seen.substr(at, wire::kLengthBytes + n));
      at += wire::kLengthBytes + n;
    }
    check(at == consumed + (had - p.left.size()), "consumed bytes are not whole frames");
    consumed = at;
    if (!p.status.ok()) break;
    check(only_a_partial_frame(p.left), "a clean extract left a frame it could judge");
  }
  return p;
}

void check_message(const wire::Message& m, const std::string& frame) {
  check(static_cast<std::uint8_t>(m.op) >= 1 && static_cast<std::uint8_t>(m.op) <= wire::kLastOp,
        "accepted an unknown op");
  check(m.keys.size() <= wire::kMaxKeys, "accepted too many keys");
  for (const auto& key : m.keys) check(key.size() <= wire::kMaxKeyBytes, "accepted a long key");
  check(frame.size() - wire::kLengthBytes <= wire::kMaxFrameBytes, "accepted a long frame");
  std::string again;
  check(wire::encode(m, &again).ok(), "an accepted message does not encode");
  check(again == frame, "an accepted message encodes to other bytes than it came from");
  std::vector<wire::Message> back;
  check(wire::extract(&again, &back).ok(), "a re-encoded message does not decode");
  check(back.size() == 1 && back[0] == m, "a re-encoded message decodes to another");
  check(again.empty(), "a re-encoded message leaves bytes behind");
  check(!wire::op_name(m.op).empty(), "an op without a name");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const kolo::fuzz::StoreFuzzInput in = kolo::fuzz::parse_store_fuzz_input(data, size);
  const Parse cut = parse(kolo::fuzz::pieces_of(in));
  const Parse whole = parse({in.stream});
  check(cut.messages == whole.messages, "pieces and the whole stream give other messages");
  check(cut.status.ok() == whole.status.ok(), "pieces and the whole stream disagree on errors");
  check(cut.status.message() == whole.status.message(), "pieces and whole: other error text");
  if (whole.status.ok()) {
    check(cut.left == whole.left, "pieces and the whole stream leave other bytes");
  } else {
    check(whole.status.code() == kolo::ErrorCode::kInvalidArgument,
          "an error not kInvalidArgument");
    check(whole.status.message().find("malformed TCP store frame") != std::string::npos,
          "an error without the malformed-frame wording");
  }
  for (std::size_t i = 0; i < whole.messages.size(); ++i) {
    check_message(whole.messages[i], whole.frames[i]);
  }
  return 0;
}
