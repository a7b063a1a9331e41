#include "core/message.h"

#include "common/coding.h"

#include <tuple>
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
    case OpType::kAddProcessSet:
      return "add_process_set";
    case OpType::kRemoveProcessSet:
      return "remove_process_set";
  }
  return "unknown-op";
}

namespace {

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

// Enum fields arrive as bytes: values no enumerator has are corruption.
bool in_range(OpType v) { return v <= OpType::kRemoveProcessSet; }
bool in_range(DataType v) { return static_cast<int>(v) < kNumDataTypes; }
bool in_range(DeviceKind v) { return v <= DeviceKind::kCUDA; }
bool in_range(ReduceOp v) { return v <= ReduceOp::kProduct; }
bool in_range(ErrorCode v) { return v >= ErrorCode::kOk && v <= ErrorCode::kInternal; }

// Little-endian fixed-width scalars, bools as one byte 0/1, strings and vectors as a
// 32-bit count followed by their elements (common/coding.h's forms).
class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    if constexpr (std::is_same_v<T, std::string>) {
      coding::put_bytes<std::uint32_t>(&out_, v);
    } else if constexpr (IsVector<T>::value) {
      coding::put(&out_, static_cast<std::uint32_t>(v.size()));
      for (const auto& x : v) put(x);
    } else {
      coding::put(&out_, v);
    }
  }
  template <typename Tuple>
  void put_all(const Tuple& fields) {
    std::apply([this](const auto&... f) { (put(f), ...); }, fields);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  bool get(T* v) {
    if constexpr (std::is_same_v<T, std::string>) {
      return in_.get_bytes<std::uint32_t>(in_.left(), v);
    } else if constexpr (IsVector<T>::value) {
      // Each element takes at least min_bytes: a count beyond what is left is refused
      // before anything is allocated for it.
      std::uint32_t n;
      if (!in_.get(&n) || in_.left() / min_bytes<typename T::value_type>() < n) return false;
      v->resize(n);
      for (auto& x : *v) {
        if (!get(&x)) return false;
      }
      return true;
    } else {
      if (!in_.get(v)) return false;
      if constexpr (std::is_enum_v<T>) return in_range(*v);
      return true;
    }
  }
  template <typename Tuple>
  bool get_all(Tuple fields) {
    return std::apply([this](auto&... f) { return (get(&f) && ...); }, fields);
  }
  bool done() const { return in_.done(); }

 private:
  template <typename T>
  static constexpr std::size_t min_bytes() {
    if constexpr (std::is_same_v<T, std::string> || IsVector<T>::value) {
      return sizeof(std::uint32_t);
    } else if constexpr (std::is_same_v<T, bool>) {
      return 1;
    } else {
      return sizeof(T);
    }
  }
  coding::ByteReader in_;
};

// The magic bytes of wire version 1 and later; builds before it sent 'K' and 'R'
// without a version byte.
constexpr std::uint8_t kRequestsMagic = 'k';
constexpr std::uint8_t kResponsesMagic = 'r';
constexpr std::uint8_t kUnversionedRequestsMagic = 'K';
constexpr std::uint8_t kUnversionedResponsesMagic = 'R';

Status corrupt(const char* what) {
  return Internal(std::string("corrupt ") + what + " message on the control plane");
}

// Reads the magic byte and the version; an error says whether the bytes are damaged or
// come from another kolo build.
Status read_header(Reader& rd, std::uint8_t magic, std::uint8_t unversioned_magic,
                   const char* what) {
  std::uint8_t m = 0, version = 0;
  if (!rd.get(&m)) return corrupt(what);
  if (m == unversioned_magic) {
    return Status(ErrorCode::kMismatch,
                  std::string("a ") + what +
                      " message from a kolo build older than wire version 1 (this build speaks "
                      "version " +
                      std::to_string(kWireVersion) +
                      "): every process of a job must run the same kolo build");
  }
  if (m != magic || !rd.get(&version)) return corrupt(what);
  if (version != kWireVersion) {
    return Status(ErrorCode::kMismatch,
                  std::string("a ") + what + " message of wire version " + std::to_string(version) +
                      " from another kolo build (this build speaks " + "version " +
                      std::to_string(kWireVersion) +
                      "): every process of a job must run the same kolo build");
  }
  return Status::OK();
}

}  // namespace

std::string encode_requests(const std::vector<Request>& requests) {
  Writer w;
  w.put(kRequestsMagic);
  w.put(kWireVersion);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(requests.size()));
  for (const auto& r : requests) w.put_all(Request::fields(r));
  return w.take();
}

Status decode_requests(const std::string& bytes, std::vector<Request>* out) {
  Reader rd(bytes);
  KOLO_RETURN_IF_ERROR(read_header(rd, kRequestsMagic, kUnversionedRequestsMagic, "request"));
  std::uint32_t n;
  if (!rd.get(&n)) return corrupt("request");
  out->clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    Request r;
    if (!rd.get_all(Request::fields(r))) return corrupt("request");
    out->push_back(std::move(r));
  }
  return rd.done() ? Status::OK() : corrupt("request");
}

std::string encode_response_list(const ResponseList& list) {
  Writer w;
  w.put(kResponsesMagic);
  w.put(kWireVersion);
  w.put(list.abort_code);
  w.put(list.abort_message);
  w.put(list.has_tunables);
  if (list.has_tunables) w.put_all(Tunables::fields(list.tunables));
  w.put<std::uint32_t>(static_cast<std::uint32_t>(list.responses.size()));
  for (const auto& r : list.responses) w.put_all(Response::fields(r));
  return w.take();
}

Status decode_response_list(const std::string& bytes, ResponseList* out) {
  Reader rd(bytes);
  KOLO_RETURN_IF_ERROR(read_header(rd, kResponsesMagic, kUnversionedResponsesMagic, "response"));
  out->tunables = Tunables{};
  if (!rd.get(&out->abort_code) || !rd.get(&out->abort_message) || !rd.get(&out->has_tunables)) {
    return corrupt("response");
  }
  if (out->has_tunables &&
      (!rd.get_all(Tunables::fields(out->tunables)) || out->tunables.fusion_threshold_bytes < 0 ||
       !(out->tunables.cycle_time_ms >= 0))) {
    return corrupt("response");
  }
  std::uint32_t n;
  if (!rd.get(&n)) return corrupt("response");
  out->responses.clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    Response r;
    if (!rd.get_all(Response::fields(r))) return corrupt("response");
    out->responses.push_back(std::move(r));
  }
  return rd.done() ? Status::OK() : corrupt("response");
}

}  // namespace kolo::core
