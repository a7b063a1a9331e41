// Encoding and decoding of the TCP store's frames (tcp_store_wire.h).
#include "rendezvous/tcp_store_wire.h"

#include <cstring>

namespace kolo::rendezvous::wire {

namespace {

void put_u32(std::uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_i64(std::int64_t v, std::string* out) {
  const auto u = static_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

void put_bytes(const std::string& s, std::string* out) {
  put_u32(static_cast<std::uint32_t>(s.size()), out);
  out->append(s);
}

std::uint64_t get_le(const char* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// Reads a body front to back; every read checks the bytes left first.
class Reader {
 public:
  Reader(const char* p, std::size_t n) : p_(p), left_(n) {}

  bool u8(std::uint8_t* v) {
    if (left_ < 1) return false;
    *v = static_cast<std::uint8_t>(*p_);
    advance(1);
    return true;
  }
  bool u32(std::uint32_t* v) {
    if (left_ < 4) return false;
    *v = static_cast<std::uint32_t>(get_le(p_, 4));
    advance(4);
    return true;
  }
  bool i64(std::int64_t* v) {
    if (left_ < 8) return false;
    *v = static_cast<std::int64_t>(get_le(p_, 8));
    advance(8);
    return true;
  }
  bool bytes(std::size_t limit, std::string* v) {
    std::uint32_t n = 0;
    if (!u32(&n) || n > left_ || n > limit) return false;
    v->assign(p_, n);
    advance(n);
    return true;
  }
  std::size_t left() const { return left_; }

 private:
  void advance(std::size_t n) {
    p_ += n;
    left_ -= n;
  }
  const char* p_;
  std::size_t left_;
};

Status malformed(const std::string& what) {
  return InvalidArgument("malformed TCP store frame: " + what);
}

Status decode_body(const char* p, std::size_t n, Message* m) {
  Reader r(p, n);
  std::uint8_t magic0 = 0, magic1 = 0, version = 0, op = 0;
  if (!r.u8(&magic0) || !r.u8(&magic1) || magic0 != kMagic0 || magic1 != kMagic1)
    return malformed("wrong magic (not a kolo TCP store client?)");
  if (!r.u8(&version) || version != kVersion)
    return malformed("version " + std::to_string(version) + ", this build speaks " +
                     std::to_string(kVersion) + " (mixed kolo versions in one job?)");
  if (!r.u8(&op) || op < 1 || op > kLastOp) return malformed("unknown op " + std::to_string(op));
  m->op = static_cast<Op>(op);
  std::uint32_t nkeys = 0;
  if (!r.u8(&m->code) || !r.u8(&m->flag) || !r.i64(&m->number) || !r.u32(&nkeys))
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
    if (!r.bytes(kMaxKeyBytes, &key))
      return malformed("a key runs past the end or over " + std::to_string(kMaxKeyBytes) +
                       " bytes");
  }
  if (!r.bytes(kMaxFrameBytes, &m->value) || !r.bytes(kMaxFrameBytes, &m->detail))
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
  put_i64(m.number, &body);
  put_u32(static_cast<std::uint32_t>(m.keys.size()), &body);
  for (const auto& key : m.keys) put_bytes(key, &body);
  if (body.size() + 8 > kMaxFrameBytes ||
      m.value.size() + m.detail.size() > kMaxFrameBytes - body.size() - 8)
    return InvalidArgument("TCP store: a value of " + std::to_string(m.value.size()) +
                           " bytes makes a frame over the limit of " +
                           std::to_string(kMaxFrameBytes) + " bytes; keep values small");
  put_bytes(m.value, &body);
  put_bytes(m.detail, &body);
  frame->clear();
  put_u32(static_cast<std::uint32_t>(body.size()), frame);
  frame->append(body);
  return Status::OK();
}

Status extract(std::string* buffer, std::vector<Message>* out) {
  std::size_t pos = 0;
  Status status;
  while (buffer->size() - pos >= kLengthBytes) {
    const std::uint64_t n = get_le(buffer->data() + pos, 4);
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
