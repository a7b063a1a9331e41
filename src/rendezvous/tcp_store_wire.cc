// Encoding and decoding of the TCP store's frames (tcp_store_wire.h).
#include "rendezvous/tcp_store_wire.h"

#include <cstring>
#include <string_view>

#include "common/coding.h"

namespace kolo::rendezvous::wire {

namespace {

Status malformed(const std::string& what) {
  return InvalidArgument("malformed TCP store frame: " + what);
}

Status decode_body(const char* p, std::size_t n, Message* m) {
  coding::ByteReader r(std::string_view(p, n));
  std::uint8_t magic0 = 0, magic1 = 0, version = 0, op = 0;
  if (!r.get(&magic0) || !r.get(&magic1) || magic0 != kMagic0 || magic1 != kMagic1)
    return malformed("wrong magic (not a kolo TCP store client?)");
  if (!r.get(&version) || version != kVersion)
    return malformed("version " + std::to_string(version) + ", this build speaks " +
                     std::to_string(kVersion) + " (mixed kolo versions in one job?)");
  if (!r.get(&op) || op < 1 || op > kLastOp) return malformed("unknown op " + std::to_string(op));
  m->op = static_cast<Op>(op);
  std::uint32_t nkeys = 0;
  if (!r.get(&m->code) || !r.get(&m->flag) || !r.get(&m->number) || !r.get(&nkeys))
    return malformed("the fixed fields run past the end");
  if (nkeys > kMaxKeys)
    return malformed(std::to_string(nkeys) + " keys, over the limit of " +
                     std::to_string(kMaxKeys));
  // Each key takes at least its 4-byte length: judged before making room for the keys, so a
  // 22-byte frame cannot make the server allocate 65536 strings.
  if (nkeys > r.left() / 4)
    return malformed(std::to_string(nkeys) + " keys in the " + std::to_string(r.left()) +
                     " bytes left of the frame");
  m->keys.resize(nkeys);
  for (auto& key : m->keys) {
    if (!r.get_bytes<std::uint32_t>(kMaxKeyBytes, &key))
      return malformed("a key runs past the end or over " + std::to_string(kMaxKeyBytes) +
                       " bytes");
  }
  if (!r.get_bytes<std::uint32_t>(kMaxFrameBytes, &m->value) ||
      !r.get_bytes<std::uint32_t>(kMaxFrameBytes, &m->detail))
    return malformed("a value runs past the end");
  if (r.left() != 0) return malformed(std::to_string(r.left()) + " trailing bytes");
  return Status::OK();
}

}  // namespace

std::string op_name(Op op) {
  switch (op) {
    case Op::kHello:
      return "hello";
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kTryGet:
      return "try_get";
    case Op::kCheck:
      return "check";
    case Op::kAdd:
      return "add";
    case Op::kCompareSet:
      return "compare_set";
    case Op::kWait:
      return "wait";
    case Op::kErase:
      return "erase";
    case Op::kReply:
      return "reply";
  }
  return "op " + std::to_string(static_cast<int>(op));
}

Status encode(const Message& m, std::string* frame) {
  if (m.keys.size() > kMaxKeys)
    return InvalidArgument("TCP store: " + std::to_string(m.keys.size()) +
                           " keys in one request, over the limit of " + std::to_string(kMaxKeys));
  for (const auto& key : m.keys) {
    if (key.size() > kMaxKeyBytes)
      return InvalidArgument("TCP store: a key of " + std::to_string(key.size()) +
                             " bytes, over the limit of " + std::to_string(kMaxKeyBytes) +
                             "; use shorter keys");
  }
  std::string body;
  body.push_back(static_cast<char>(kMagic0));
  body.push_back(static_cast<char>(kMagic1));
  body.push_back(static_cast<char>(kVersion));
  body.push_back(static_cast<char>(m.op));
  body.push_back(static_cast<char>(m.code));
  body.push_back(static_cast<char>(m.flag));
  coding::put(&body, m.number);
  coding::put(&body, static_cast<std::uint32_t>(m.keys.size()));
  for (const auto& key : m.keys) coding::put_bytes<std::uint32_t>(&body, key);
  if (body.size() + 8 > kMaxFrameBytes ||
      m.value.size() + m.detail.size() > kMaxFrameBytes - body.size() - 8)
    return InvalidArgument("TCP store: a value of " + std::to_string(m.value.size()) +
                           " bytes makes a frame over the limit of " +
                           std::to_string(kMaxFrameBytes) + " bytes; keep values small");
  coding::put_bytes<std::uint32_t>(&body, m.value);
  coding::put_bytes<std::uint32_t>(&body, m.detail);
  frame->clear();
  coding::put(frame, static_cast<std::uint32_t>(body.size()));
  frame->append(body);
  return Status::OK();
}

Status extract(std::string* buffer, std::vector<Message>* out) {
  std::size_t pos = 0;
  Status status;
  while (buffer->size() - pos >= kLengthBytes) {
    std::uint64_t n = 0;
    coding::ByteReader(std::string_view(*buffer).substr(pos)).get_fixed(kLengthBytes, &n);
    if (n > kMaxFrameBytes) {
      status = malformed("a frame of " + std::to_string(n) + " bytes, over the limit of " +
                         std::to_string(kMaxFrameBytes));
      break;
    }
    if (buffer->size() - pos - kLengthBytes < n) break;
    Message m;
    status = decode_body(buffer->data() + pos + kLengthBytes, n, &m);
    if (!status.ok()) break;
    out->push_back(std::move(m));
    pos += kLengthBytes + n;
  }
  buffer->erase(0, pos);
  return status;
}

}  // namespace kolo::rendezvous::wire
