// Fields and the wire codec (wire.h says the format).
#include "ps/wire.h"

#include <cstring>
#include <variant>

#include "common/coding.h"

namespace kolo::ps {

struct Fields::Value {
  std::variant<std::int64_t, double, std::string> v;
};

namespace {

enum FieldType : std::uint8_t { kInt = 1, kDouble = 2, kString = 3 };

const char* type_name(const Fields::Value& v) {
  switch (v.v.index()) {
    case 0:
      return "an integer";
    case 1:
      return "a double";
    default:
      return "a string";
  }
}

template <typename T>
Status get_typed(const std::map<std::string, std::shared_ptr<const Fields::Value>>& values,
                 const std::string& key, const char* want, T* out) {
  const auto it = values.find(key);
  if (it == values.end()) return InvalidArgument("the message has no field '" + key + "'");
  const T* v = std::get_if<T>(&it->second->v);
  if (v == nullptr) {
    return InvalidArgument("the message's field '" + key + "' is " + type_name(*it->second) +
                           ", not " + want);
  }
  *out = *v;
  return Status::OK();
}

// The header frame's fields in common/coding.h's forms.
class Writer {
 public:
  template <typename T>
  void put(T v) {
    coding::put(&out, v);
  }
  void bytes16(const std::string& s) { coding::put_bytes<std::uint16_t>(&out, s); }
  void bytes32(const std::string& s) { coding::put_bytes<std::uint32_t>(&out, s); }
  std::string out;
};

// Every read names the field it was after, for the error.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  std::size_t left() const { return in_.left(); }
  template <typename T>
  Status get(const char* what, T* v) {
    return in_.get(v) ? Status::OK() : cut(what);
  }
  // A length-prefixed byte string of at most `limit` bytes.
  template <typename Len>
  Status bytes(const char* what, std::size_t limit, std::string* s) {
    Len n = 0;
    KOLO_RETURN_IF_ERROR(get(what, &n));
    if (n > limit) {
      return InvalidArgument(std::string("rpc message: the ") + what + " claims " +
                             std::to_string(n) + " bytes, over the limit of " +
                             std::to_string(limit));
    }
    std::string_view v;
    if (!in_.take(n, &v)) return cut(what);
    s->assign(v);
    return Status::OK();
  }

 private:
  Status cut(const char* what) const {
    return InvalidArgument(std::string("rpc message: the header frame ends inside the ") + what +
                           " (at byte " + std::to_string(in_.position()) + " of " +
                           std::to_string(in_.position() + in_.left()) + ")");
  }
  coding::ByteReader in_;
};

}  // namespace

Fields& Fields::set(const std::string& key, std::int64_t value) {
  values_[key] = std::make_shared<const Value>(Value{value});
  return *this;
}
Fields& Fields::set(const std::string& key, double value) {
  values_[key] = std::make_shared<const Value>(Value{value});
  return *this;
}
Fields& Fields::set(const std::string& key, std::string value) {
  values_[key] = std::make_shared<const Value>(Value{std::move(value)});
  return *this;
}
bool Fields::has(const std::string& key) const { return values_.count(key) != 0; }
Status Fields::get(const std::string& key, std::int64_t* out) const {
  return get_typed(values_, key, "an integer", out);
}
Status Fields::get(const std::string& key, double* out) const {
  return get_typed(values_, key, "a double", out);
}
Status Fields::get(const std::string& key, std::string* out) const {
  return get_typed(values_, key, "a string", out);
}
Status Fields::get_or(const std::string& key, std::int64_t fallback, std::int64_t* out) const {
  if (!has(key)) {
    *out = fallback;
    return Status::OK();
  }
  return get(key, out);
}

std::string WireCodec::encode(const WireHeader& h, const Fields& fields) {
  Writer w;
  w.put(kWireMagic);
  w.put(kWireVersion);
  w.put(static_cast<std::uint8_t>(h.kind));
  w.put(static_cast<std::uint8_t>(h.code));
  w.put(h.request_id);
  w.put(h.deadline_ms);
  w.bytes16(h.method.substr(0, kMaxMethodBytes));
  w.bytes32(h.error.substr(0, kMaxErrorBytes));
  w.put(h.num_blobs);
  w.put(static_cast<std::uint32_t>(fields.values_.size()));
  for (const auto& [key, value] : fields.values_) {
    w.bytes16(key);
    if (const auto* i = std::get_if<std::int64_t>(&value->v)) {
      w.put(std::uint8_t{kInt});
      w.put(*i);
    } else if (const auto* d = std::get_if<double>(&value->v)) {
      w.put(std::uint8_t{kDouble});
      w.put(*d);
    } else {
      w.put(std::uint8_t{kString});
      w.bytes32(std::get<std::string>(value->v));
    }
  }
  return std::move(w.out);
}

Status WireCodec::decode(std::string_view frame, WireHeader* h, Fields* fields) {
  if (frame.size() > kMaxHeaderBytes) {
    return InvalidArgument("rpc message: a header frame of " + std::to_string(frame.size()) +
                           " bytes, over the limit of " + std::to_string(kMaxHeaderBytes));
  }
  Reader r(frame);
  std::uint32_t magic = 0;
  KOLO_RETURN_IF_ERROR(r.get("magic", &magic));
  if (magic != kWireMagic) {
    return InvalidArgument("rpc message: not a kolo ps message (bad magic " +
                           std::to_string(magic) + "); is another program using this port?");
  }
  std::uint16_t version = 0;
  KOLO_RETURN_IF_ERROR(r.get("version", &version));
  if (version != kWireVersion) {
    return InvalidArgument("rpc message: wire version " + std::to_string(version) +
                           ", this build speaks " + std::to_string(kWireVersion) +
                           " (every process of the job must run the same kolo)");
  }
  std::uint8_t kind = 0, code = 0;
  KOLO_RETURN_IF_ERROR(r.get("kind", &kind));
  if (kind != static_cast<std::uint8_t>(WireKind::kRequest) &&
      kind != static_cast<std::uint8_t>(WireKind::kReply)) {
    return InvalidArgument("rpc message: unknown kind " + std::to_string(kind));
  }
  KOLO_RETURN_IF_ERROR(r.get("status code", &code));
  if (code > static_cast<std::uint8_t>(ErrorCode::kInternal)) {
    return InvalidArgument("rpc message: unknown status code " + std::to_string(code));
  }
  h->kind = static_cast<WireKind>(kind);
  h->code = static_cast<ErrorCode>(code);
  KOLO_RETURN_IF_ERROR(r.get("request id", &h->request_id));
  KOLO_RETURN_IF_ERROR(r.get("deadline", &h->deadline_ms));
  KOLO_RETURN_IF_ERROR(r.bytes<std::uint16_t>("method", kMaxMethodBytes, &h->method));
  KOLO_RETURN_IF_ERROR(r.bytes<std::uint32_t>("error message", kMaxErrorBytes, &h->error));
  KOLO_RETURN_IF_ERROR(r.get("blob count", &h->num_blobs));
  if (h->num_blobs > kMaxBlobs) {
    return InvalidArgument("rpc message: " + std::to_string(h->num_blobs) +
                           " blobs, over the limit of " + std::to_string(kMaxBlobs));
  }
  std::uint32_t n = 0;
  KOLO_RETURN_IF_ERROR(r.get("field count", &n));
  // Each field takes at least 2 (key length) + 1 (type) + 4 bytes: refuse a count the
  // frame cannot hold before making room for any of it.
  if (n > kMaxFields || std::size_t{n} * 7 > r.left()) {
    return InvalidArgument("rpc message: " + std::to_string(n) + " fields claimed in " +
                           std::to_string(r.left()) + " bytes (limit " +
                           std::to_string(kMaxFields) + " fields)");
  }
  Fields out;
  for (std::uint32_t i = 0; i < n; ++i) {
    std::string key;
    KOLO_RETURN_IF_ERROR(r.bytes<std::uint16_t>("field key", kMaxKeyBytes, &key));
    if (out.has(key)) return InvalidArgument("rpc message: the field '" + key + "' appears twice");
    std::uint8_t type = 0;
    KOLO_RETURN_IF_ERROR(r.get("field type", &type));
    if (type == kInt) {
      std::int64_t v = 0;
      KOLO_RETURN_IF_ERROR(r.get("integer field", &v));
      out.set(key, v);
    } else if (type == kDouble) {
      double v = 0;
      KOLO_RETURN_IF_ERROR(r.get("double field", &v));
      out.set(key, v);
    } else if (type == kString) {
      std::string v;
      KOLO_RETURN_IF_ERROR(r.bytes<std::uint32_t>("string field", kMaxStringFieldBytes, &v));
      out.set(key, std::move(v));
    } else {
      return InvalidArgument("rpc message: the field '" + key + "' has unknown type " +
                             std::to_string(type));
    }
  }
  if (r.left() != 0) {
    return InvalidArgument("rpc message: " + std::to_string(r.left()) +
                           " bytes after the last field");
  }
  *fields = std::move(out);
  return Status::OK();
}

Status decode_message(const std::vector<std::string_view>& frames, std::size_t max_bytes,
                      WireHeader* header, Message* message) {
  if (frames.empty()) return InvalidArgument("rpc message: no frames");
  std::size_t total = 0;
  for (const auto& f : frames) total += f.size();
  if (total > max_bytes) {
    return InvalidArgument("rpc message: " + std::to_string(total) + " bytes, over the limit of " +
                           std::to_string(max_bytes));
  }
  Message m;
  KOLO_RETURN_IF_ERROR(WireCodec::decode(frames[0], header, &m.fields));
  if (header->num_blobs != frames.size() - 1) {
    return InvalidArgument("rpc message: the header says " + std::to_string(header->num_blobs) +
                           " blobs, " + std::to_string(frames.size() - 1) + " frames follow it");
  }
  m.method = header->method;
  m.blobs.reserve(frames.size() - 1);
  for (std::size_t i = 1; i < frames.size(); ++i) m.blobs.emplace_back(frames[i]);
  *message = std::move(m);
  return Status::OK();
}

std::size_t wire_bytes(const Message& message) {
  // Encoding the header to count it is cheap: fields are small by design, blobs are not
  // touched.
  WireHeader h;
  h.method = message.method;
  h.num_blobs = static_cast<std::uint32_t>(message.blobs.size());
  std::size_t n = WireCodec::encode(h, message.fields).size();
  for (const auto& b : message.blobs) n += b.size();
  return n;
}

}  // namespace kolo::ps
