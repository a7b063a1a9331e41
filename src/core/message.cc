#include "core/message.h"

#include <cstring>
#include <type_traits>

namespace kolo::core {

const char* op_name(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kJoin:
      return "join";
  }
  return "unknown-op";
}

bool Request::same_signature(const Request& o) const {
  return name == o.name && process_set == o.process_set && op == o.op && dtype == o.dtype &&
         device == o.device && reduce_op == o.reduce_op && root == o.root &&
         prescale == o.prescale && postscale == o.postscale && wire_dtype == o.wire_dtype &&
         shapes == o.shapes && splits == o.splits;
}

namespace {

// Little-endian fixed-width fields; the control plane only runs between builds of the
// same kolo, so no versioning beyond a magic byte per message.
class Writer {
 public:
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&v);
    out_.append(p, sizeof v);
  }
  void str(const std::string& s) {
    pod<std::uint32_t>(static_cast<std::uint32_t>(s.size()));
    out_ += s;
  }
  template <typename T>
  void vec(const std::vector<T>& v) {
    pod<std::uint32_t>(static_cast<std::uint32_t>(v.size()));
    for (const T& x : v) pod<T>(x);
  }
  void shapes(const std::vector<Shape>& v) {
    pod<std::uint32_t>(static_cast<std::uint32_t>(v.size()));
    for (const auto& s : v) vec(s);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  bool pod(T* v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool str(std::string* s) {
    std::uint32_t n;
    if (!pod(&n) || in_.size() - pos_ < n) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool vec(std::vector<T>* v) {
    std::uint32_t n;
    if (!pod(&n) || (in_.size() - pos_) / sizeof(T) < n) return false;
    v->resize(n);
    for (auto& x : *v) pod(&x);
    return true;
  }
  bool shapes(std::vector<Shape>* v) {
    std::uint32_t n;
    if (!pod(&n) || in_.size() - pos_ < n) return false;
    v->resize(n);
    for (auto& s : *v) {
      if (!vec(&s)) return false;
    }
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  std::size_t pos_ = 0;
};

constexpr std::uint8_t kRequestsMagic = 0x4b;   // 'K'
constexpr std::uint8_t kResponsesMagic = 0x52;  // 'R'

// Enum fields arrive as bytes; reject values no enumerator has.
bool valid(const Request& r) {
  return r.op <= OpType::kJoin && static_cast<int>(r.dtype) < kNumDataTypes &&
         static_cast<int>(r.wire_dtype) < kNumDataTypes && r.device <= DeviceKind::kCUDA &&
         r.reduce_op <= ReduceOp::kProduct;
}
bool valid(const Response& r) {
  return r.op <= OpType::kJoin && static_cast<int>(r.dtype) < kNumDataTypes &&
         static_cast<int>(r.wire_dtype) < kNumDataTypes && r.device <= DeviceKind::kCUDA &&
         r.reduce_op <= ReduceOp::kProduct && r.error_code >= ErrorCode::kOk &&
         r.error_code <= ErrorCode::kInternal;
}
bool valid(ErrorCode c) { return c >= ErrorCode::kOk && c <= ErrorCode::kInternal; }

Status corrupt(const char* what) {
  return Internal(std::string("corrupt ") + what + " message on the control plane");
}

}  // namespace

std::string encode_requests(const std::vector<Request>& requests) {
  Writer w;
  w.pod(kRequestsMagic);
  w.pod<std::uint32_t>(static_cast<std::uint32_t>(requests.size()));
  for (const auto& r : requests) {
    w.pod(r.rank);
    w.pod(r.process_set);
    w.str(r.name);
    w.pod(r.op);
    w.pod(r.dtype);
    w.pod(r.device);
    w.pod(r.reduce_op);
    w.pod(r.root);
    w.pod(r.prescale);
    w.pod(r.postscale);
    w.pod(r.wire_dtype);
    w.shapes(r.shapes);
    w.vec(r.splits);
  }
  return w.take();
}

Status decode_requests(const std::string& bytes, std::vector<Request>* out) {
  Reader rd(bytes);
  std::uint8_t magic;
  std::uint32_t n;
  if (!rd.pod(&magic) || magic != kRequestsMagic || !rd.pod(&n)) return corrupt("request");
  out->clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    Request r;
    if (!rd.pod(&r.rank) || !rd.pod(&r.process_set) || !rd.str(&r.name) || !rd.pod(&r.op) ||
        !rd.pod(&r.dtype) || !rd.pod(&r.device) || !rd.pod(&r.reduce_op) || !rd.pod(&r.root) ||
        !rd.pod(&r.prescale) || !rd.pod(&r.postscale) || !rd.pod(&r.wire_dtype) ||
        !rd.shapes(&r.shapes) || !rd.vec(&r.splits) || !valid(r)) {
      return corrupt("request");
    }
    out->push_back(std::move(r));
  }
  return rd.done() ? Status::OK() : corrupt("request");
}

std::string encode_response_list(const ResponseList& list) {
  Writer w;
  w.pod(kResponsesMagic);
  w.pod(list.abort_code);
  w.str(list.abort_message);
  w.pod<std::uint8_t>(list.has_tunables ? 1 : 0);
  if (list.has_tunables) {
    w.pod(list.tunables.fusion_threshold_bytes);
    w.pod(list.tunables.cycle_time_ms);
    w.pod<std::uint8_t>(list.tunables.hierarchical ? 1 : 0);
  }
  w.pod<std::uint32_t>(static_cast<std::uint32_t>(list.responses.size()));
  for (const auto& r : list.responses) {
    w.pod(r.op);
    w.str(r.name);
    w.pod(r.error_code);
    w.str(r.error);
    w.pod(r.dtype);
    w.pod(r.device);
    w.pod(r.reduce_op);
    w.pod(r.root);
    w.pod(r.prescale);
    w.pod(r.postscale);
    w.pod(r.wire_dtype);
    w.shapes(r.shapes);
    w.vec(r.first_dims);
    w.vec(r.splits);
    w.vec(r.joined_ranks);
    w.pod(r.last_joined);
  }
  return w.take();
}

Status decode_response_list(const std::string& bytes, ResponseList* out) {
  Reader rd(bytes);
  std::uint8_t magic;
  std::uint32_t n;
  std::uint8_t has_tunables = 0, hierarchical = 0;
  if (!rd.pod(&magic) || magic != kResponsesMagic || !rd.pod(&out->abort_code) ||
      !valid(out->abort_code) || !rd.str(&out->abort_message) || !rd.pod(&has_tunables) ||
      has_tunables > 1) {
    return corrupt("response");
  }
  out->has_tunables = has_tunables == 1;
  out->tunables = Tunables{};
  if (out->has_tunables &&
      (!rd.pod(&out->tunables.fusion_threshold_bytes) || !rd.pod(&out->tunables.cycle_time_ms) ||
       !rd.pod(&hierarchical) || hierarchical > 1 || out->tunables.fusion_threshold_bytes < 0 ||
       !(out->tunables.cycle_time_ms >= 0))) {
    return corrupt("response");
  }
  out->tunables.hierarchical = hierarchical == 1;
  if (!rd.pod(&n)) return corrupt("response");
  out->responses.clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    Response r;
    if (!rd.pod(&r.op) || !rd.str(&r.name) || !rd.pod(&r.error_code) || !rd.str(&r.error) ||
        !rd.pod(&r.dtype) || !rd.pod(&r.device) || !rd.pod(&r.reduce_op) || !rd.pod(&r.root) ||
        !rd.pod(&r.prescale) || !rd.pod(&r.postscale) || !rd.pod(&r.wire_dtype) ||
        !rd.shapes(&r.shapes) || !rd.vec(&r.first_dims) || !rd.vec(&r.splits) ||
        !rd.vec(&r.joined_ranks) || !rd.pod(&r.last_joined) || !valid(r)) {
      return corrupt("response");
    }
    out->responses.push_back(std::move(r));
  }
  return rd.done() ? Status::OK() : corrupt("response");
}

}  // namespace kolo::core
