// Binary encoding of Request lists and ResponseLists (core/message.h): round trips with
// every field set, and damaged bytes (truncated, flipped, extended) rejected without a crash.
#include "core/message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kolo::core {
namespace {

// Index of the first field in which a and b differ (by the message's field list), or -1.
template <typename M>
int first_difference(const M& a, const M& b) {
  int index = -1, i = 0;
  std::apply(
      [&](const auto&... fa) {
        std::apply(
            [&](const auto&... fb) { ((index < 0 && !(fa == fb) ? index = i : 0, ++i), ...); },
            M::fields(b));
      },
      M::fields(a));
  return index;
}

// A value of the same type that differs from `v` (and is valid on the wire).
template <typename T>
void perturb(T& v) {
  if constexpr (std::is_enum_v<T>) {
    v = static_cast<T>(static_cast<int>(v) == 0 ? 1 : 0);
  } else if constexpr (std::is_same_v<T, bool>) {
    v = !v;
  } else if constexpr (std::is_same_v<T, std::string>) {
    v += "x";
  } else if constexpr (requires { v.emplace_back(); }) {
    v.emplace_back();
  } else {
    v = v * 2 + 1;
  }
}

template <typename M, typename Encode, typename Decode, std::size_t... I>
void expect_each_field_matters(const M& base, Encode encode, Decode decode,
                               std::index_sequence<I...>) {
  auto one = [&](auto index) {
    M changed = base;
    perturb(std::get<index.value>(M::fields(changed)));
    EXPECT_EQ(first_difference(base, changed), static_cast<int>(index.value));
    EXPECT_FALSE(changed == base) << "field " << index.value;
    EXPECT_NE(encode(changed), encode(base)) << "field " << index.value << " is not encoded";
    M back;
    ASSERT_TRUE(decode(encode(changed), &back)) << "field " << index.value;
    EXPECT_EQ(first_difference(back, changed), -1) << "field " << index.value;
  };
  (one(std::integral_constant<std::size_t, I>{}), ...);
}

template <typename M, typename Encode, typename Decode>
void expect_every_field_matters(const M& base, Encode encode, Decode decode) {
  M probe = base;
  constexpr std::size_t n = std::tuple_size_v<decltype(M::fields(probe))>;
  expect_each_field_matters(base, encode, decode, std::make_index_sequence<n>{});
}

void expect_same(const Request& a, const Request& b) {
  EXPECT_TRUE(a == b) << "request '" << a.name << "' differs in field " << first_difference(a, b)
                      << " of Request::fields";
  EXPECT_TRUE(a.same_signature(b)) << a.name << " vs " << b.name;
}

void expect_same(const Response& a, const Response& b) {
  EXPECT_TRUE(a == b) << "response '" << a.name << "' differs in field " << first_difference(a, b)
                      << " of Response::fields";
}

// Every field away from its default.
std::vector<Request> sample_requests() {
  Request a;
  a.rank = 3;
  a.process_set = 5;
  a.name = "layer1.weight.grad";
  a.op = OpType::kAlltoall;
  a.dtype = DataType::kBFloat16;
  a.device = DeviceKind::kCUDA;
  a.reduce_op = ReduceOp::kProduct;
  a.root = -7;
  a.prescale = 0.125;
  a.postscale = -3.5e10;
  a.shapes = {{4, 5, 6}, {}, {0}};
  a.splits = {1, 0, 3, -2};

  Request b;  // defaults, with an empty name and a 0-d shape
  b.shapes = {{}};

  Request c;
  c.rank = 2147483647;
  c.name = std::string("with\0nul", 8) + std::string(300, 'x');
  c.op = OpType::kJoin;
  c.dtype = DataType::kBool;
  c.reduce_op = ReduceOp::kMax;
  c.root = 1;
  c.shapes = {{std::int64_t{1} << 40, -1}};
  return {a, b, c};
}

ResponseList sample_response_list() {
  Response a;
  a.op = OpType::kAllgather;
  a.name = "embeddings";
  a.dtype = DataType::kFloat16;
  a.device = DeviceKind::kCUDA;
  a.reduce_op = ReduceOp::kMin;
  a.root = 2;
  a.prescale = 2.0;
  a.postscale = 0.5;
  a.shapes = {{3, 4}, {7}};
  a.first_dims = {3, 0, 9};
  a.splits = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  a.joined_ranks = {0, 2};
  a.last_joined = 2;

  Response b;
  b.op = OpType::kBroadcast;
  b.name = "x";
  b.error_code = ErrorCode::kMismatch;
  b.error = "Mismatched shapes for broadcast 'x': [1] on rank 0; [2] on rank 1.";

  Response c;  // all defaults: empty name, no shapes
  ResponseList list;
  list.responses = {a, b, c};
  list.abort_code = ErrorCode::kStalled;
  list.abort_message = "stalled for 30 seconds";
  list.has_tunables = true;
  list.tunables =
      Tunables{.fusion_threshold_bytes = 4 << 20, .cycle_time_ms = 2.5, .hierarchical = true};
  return list;
}

TEST(MessageTest, RequestsRoundTrip) {
  const auto requests = sample_requests();
  std::vector<Request> out = {Request{}};  // decode replaces previous contents
  ASSERT_TRUE(decode_requests(encode_requests(requests), &out).ok());
  ASSERT_EQ(out.size(), requests.size());
  for (std::size_t i = 0; i < out.size(); ++i) expect_same(out[i], requests[i]);
  // 0-d shape and "no shapes" stay distinct.
  EXPECT_EQ(out[1].shapes.size(), 1u);
  EXPECT_TRUE(out[1].shapes[0].empty());
  EXPECT_TRUE(out[0].shapes[1].empty());
}

TEST(MessageTest, EmptyRequestListRoundTrips) {
  std::vector<Request> out = sample_requests();
  ASSERT_TRUE(decode_requests(encode_requests({}), &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(MessageTest, ResponseListRoundTrip) {
  const auto list = sample_response_list();
  ResponseList out;
  out.responses.resize(5);
  ASSERT_TRUE(decode_response_list(encode_response_list(list), &out).ok());
  EXPECT_EQ(out.abort_code, list.abort_code);
  EXPECT_EQ(out.abort_message, list.abort_message);
  EXPECT_TRUE(out.has_tunables);
  EXPECT_EQ(out.tunables, list.tunables);
  ASSERT_EQ(out.responses.size(), list.responses.size());
  for (std::size_t i = 0; i < out.responses.size(); ++i) {
    expect_same(out.responses[i], list.responses[i]);
  }
  EXPECT_TRUE(out.responses[1].is_error());
  EXPECT_FALSE(out.responses[0].is_error());
}

TEST(MessageTest, EmptyResponseListRoundTrips) {
  ResponseList out = sample_response_list();
  ASSERT_TRUE(decode_response_list(encode_response_list(ResponseList{}), &out).ok());
  EXPECT_TRUE(out.responses.empty());
  EXPECT_EQ(out.abort_code, ErrorCode::kOk);
  EXPECT_EQ(out.abort_message, "");
  EXPECT_FALSE(out.has_tunables);
  EXPECT_EQ(out.tunables, Tunables{});
}

TEST(MessageTest, EncodingIsDeterministic) {
  EXPECT_EQ(encode_requests(sample_requests()), encode_requests(sample_requests()));
  EXPECT_EQ(encode_response_list(sample_response_list()),
            encode_response_list(sample_response_list()));
  // Requests and responses are told apart by their magic byte.
  std::vector<Request> reqs;
  ResponseList list;
  EXPECT_FALSE(decode_requests(encode_response_list(ResponseList{}), &reqs).ok());
  EXPECT_FALSE(decode_response_list(encode_requests({}), &list).ok());
}

TEST(MessageTest, EveryTruncationOfRequestsFails) {
  const std::string bytes = encode_requests(sample_requests());
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    std::vector<Request> out;
    const Status s = decode_requests(bytes.substr(0, len), &out);
    ASSERT_FALSE(s.ok()) << "truncated to " << len << " of " << bytes.size();
    EXPECT_FALSE(s.message().empty());
  }
}

TEST(MessageTest, EveryTruncationOfResponseListFails) {
  const std::string bytes = encode_response_list(sample_response_list());
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    ResponseList out;
    ASSERT_FALSE(decode_response_list(bytes.substr(0, len), &out).ok())
        << "truncated to " << len << " of " << bytes.size();
  }
}

TEST(MessageTest, TrailingBytesAndBadMagicFail) {
  std::vector<Request> reqs;
  ResponseList list;
  EXPECT_FALSE(decode_requests(encode_requests(sample_requests()) + '\0', &reqs).ok());
  EXPECT_FALSE(
      decode_response_list(encode_response_list(sample_response_list()) + 'x', &list).ok());
  std::string r = encode_requests(sample_requests());
  r[0] = static_cast<char>(r[0] + 1);
  EXPECT_FALSE(decode_requests(r, &reqs).ok());
  std::string l = encode_response_list(sample_response_list());
  l[0] = static_cast<char>(l[0] + 1);
  EXPECT_FALSE(decode_response_list(l, &list).ok());
}

// Huge counts must be rejected before anything is allocated for them.
TEST(MessageTest, HugeLengthFieldsFail) {
  Request one;
  one.name = "abc";
  one.shapes = {{2}};
  const std::string bytes = encode_requests({one});
  // Layout: magic(1) version(1) count(4) rank(4) process_set(4) name_len(4) "abc" ...
  const std::uint32_t huge = 0xffffffffu;
  for (std::size_t offset : {std::size_t{2}, std::size_t{14}}) {
    std::string bad = bytes;
    std::memcpy(bad.data() + offset, &huge, sizeof huge);
    std::vector<Request> out;
    EXPECT_FALSE(decode_requests(bad, &out).ok()) << "length field at " << offset;
  }
  // shapes count follows name(3) op dtype device reduce_op(4) root(4) prescale postscale(16).
  const std::size_t shapes_at = 2 + 4 + 4 + 4 + 4 + 3 + 4 + 4 + 16 + 1;  // + wire_dtype
  for (std::size_t offset : {shapes_at, shapes_at + 4}) {  // shape count, first shape's rank
    std::string bad = bytes;
    std::memcpy(bad.data() + offset, &huge, sizeof huge);
    std::vector<Request> out;
    EXPECT_FALSE(decode_requests(bad, &out).ok()) << "length field at " << offset;
  }
}

// Whatever byte is damaged, decoding either fails or yields a message whose encoding is
// exactly the damaged bytes (the format has one encoding per message); it never crashes.
TEST(MessageTest, AnySingleByteCorruptionIsRejectedOrConsistent) {
  const std::string reqs = encode_requests(sample_requests());
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    for (int delta : {1, 0x80, 0xff}) {
      std::string bad = reqs;
      bad[i] = static_cast<char>(bad[i] + delta);
      std::vector<Request> out;
      if (decode_requests(bad, &out).ok()) {
        ASSERT_EQ(encode_requests(out), bad) << "byte " << i;
      }
    }
  }
  const std::string list = encode_response_list(sample_response_list());
  for (std::size_t i = 0; i < list.size(); ++i) {
    for (int delta : {1, 0x80, 0xff}) {
      std::string bad = list;
      bad[i] = static_cast<char>(bad[i] + delta);
      ResponseList out;
      if (decode_response_list(bad, &out).ok()) {
        ASSERT_EQ(encode_response_list(out), bad) << "byte " << i;
      }
    }
  }
}

// An enum byte outside its enumeration is corruption, not a request to act on.
TEST(MessageTest, OutOfRangeEnumValuesFail) {
  Request one;
  one.name = "abc";
  const std::string bytes = encode_requests({one});
  const std::size_t enums_at = 2 + 4 + 4 + 4 + 4 + 3;  // op, dtype, device, reduce_op
  const char* fields[] = {"op", "dtype", "device", "reduce_op"};
  for (std::size_t k = 0; k < 4; ++k) {
    std::string bad = bytes;
    bad[enums_at + k] = static_cast<char>(0xee);
    std::vector<Request> out;
    EXPECT_FALSE(decode_requests(bad, &out).ok()) << fields[k] << " = 0xee was accepted";
  }
  Response r;
  ResponseList list;
  list.responses = {r};
  const std::string rbytes = encode_response_list(list);
  // magic(1) version(1) abort_code(4) abort_message(4) has_tunables(1) count(4) op(1)
  const std::size_t op_at = 1 + 1 + 4 + 4 + 1 + 4;
  ASSERT_EQ(rbytes[op_at], static_cast<char>(OpType::kAllreduce));
  std::string bad = rbytes;
  bad[op_at] = static_cast<char>(0xee);
  ResponseList out;
  EXPECT_FALSE(decode_response_list(bad, &out).ok()) << "response op = 0xee was accepted";
  bad[op_at] = static_cast<char>(OpType::kJoin);  // the same place with a valid op decodes
  EXPECT_TRUE(decode_response_list(bad, &out).ok());
  bad = rbytes;
  const std::int32_t bad_code = 1000;
  std::memcpy(bad.data() + 2, &bad_code, sizeof bad_code);
  EXPECT_FALSE(decode_response_list(bad, &out).ok()) << "abort_code = 1000 was accepted";
}

// Two kolo builds in one job: a message of another wire version, or from a build before
// versions (no version byte), is refused as such rather than misread.
TEST(MessageTest, OtherWireVersionsAreRefusedSayingSo) {
  std::string reqs = encode_requests(sample_requests());
  std::string list = encode_response_list(sample_response_list());
  ASSERT_EQ(static_cast<std::uint8_t>(reqs[1]), kWireVersion);
  ASSERT_EQ(static_cast<std::uint8_t>(list[1]), kWireVersion);
  reqs[1] = static_cast<char>(kWireVersion + 1);
  list[1] = static_cast<char>(kWireVersion + 1);
  std::vector<Request> out;
  ResponseList out_list;
  Status s = decode_requests(reqs, &out);
  EXPECT_EQ(s.code(), ErrorCode::kMismatch);
  EXPECT_NE(s.message().find("request message of wire version " + std::to_string(kWireVersion + 1) +
                             " from another kolo build"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("same kolo build"), std::string::npos) << s.message();
  s = decode_response_list(list, &out_list);
  EXPECT_EQ(s.code(), ErrorCode::kMismatch);
  EXPECT_NE(s.message().find("response message of wire version"), std::string::npos) << s.message();
  // A build before versions started with 'K' / 'R' and a count.
  s = decode_requests(std::string("K\1\0\0\0", 5), &out);
  EXPECT_EQ(s.code(), ErrorCode::kMismatch);
  EXPECT_NE(s.message().find("older than wire version 1"), std::string::npos) << s.message();
  s = decode_response_list(std::string("R\0\0\0\0", 5), &out_list);
  EXPECT_EQ(s.code(), ErrorCode::kMismatch);
}

// Aggregate initialisation from N values compiles only for N up to the number of
// members: the largest such N is the member count.
struct AnyField {
  template <typename T>
  operator T() const;
};
template <typename T, typename... Fields>
constexpr std::size_t member_count() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; }) {
    return member_count<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}

// The one field list of each message names every member: a field added to the struct but
// not to `fields` would be silently dropped on the wire (and from the cache's comparison).
TEST(MessageTest, FieldListsNameEveryMember) {
  Request r;
  Response p;
  Tunables t;
  EXPECT_EQ(std::tuple_size_v<decltype(Request::fields(r))>, member_count<Request>());
  EXPECT_EQ(std::tuple_size_v<decltype(Request::signature_fields(r))> + 1, member_count<Request>());
  EXPECT_EQ(std::tuple_size_v<decltype(Response::fields(p))>, member_count<Response>());
  EXPECT_EQ(std::tuple_size_v<decltype(Tunables::fields(t))>, member_count<Tunables>());
}

// Every field is encoded and compared: changing any one of them changes the encoding,
// breaks ==, and still round-trips.
TEST(MessageTest, EveryFieldIsEncodedAndCompared) {
  auto encode_request = [](const Request& r) { return encode_requests({r}); };
  auto decode_request = [](const std::string& bytes, Request* r) {
    std::vector<Request> out;
    const Status s = decode_requests(bytes, &out);
    if (s.ok() && out.size() == 1) *r = out[0];
    return s.ok() && out.size() == 1;
  };
  expect_every_field_matters(sample_requests()[0], encode_request, decode_request);
  auto encode_response = [](const Response& r) {
    ResponseList list;
    list.responses = {r};
    return encode_response_list(list);
  };
  auto decode_response = [](const std::string& bytes, Response* r) {
    ResponseList list;
    const Status s = decode_response_list(bytes, &list);
    if (s.ok() && list.responses.size() == 1) *r = list.responses[0];
    return s.ok() && list.responses.size() == 1;
  };
  expect_every_field_matters(sample_response_list().responses[0], encode_response, decode_response);
  auto encode_tunables = [](const Tunables& t) {
    ResponseList list;
    list.has_tunables = true;
    list.tunables = t;
    return encode_response_list(list);
  };
  auto decode_tunables = [](const std::string& bytes, Tunables* t) {
    ResponseList list;
    const bool ok = decode_response_list(bytes, &list).ok() && list.has_tunables;
    if (ok) *t = list.tunables;
    return ok;
  };
  expect_every_field_matters(sample_response_list().tunables, encode_tunables, decode_tunables);
}

TEST(MessageTest, SameSignatureIgnoresRankOnly) {
  const Request base = sample_requests()[0];
  Request other = base;
  other.rank = 0;
  EXPECT_TRUE(base.same_signature(other));
  auto differs = [&](auto change) {
    Request r = base;
    change(r);
    return !base.same_signature(r);
  };
  EXPECT_TRUE(differs([](Request& r) { r.name += "!"; }));
  EXPECT_TRUE(differs([](Request& r) { r.op = OpType::kAllreduce; }));
  EXPECT_TRUE(differs([](Request& r) { r.dtype = DataType::kFloat32; }));
  EXPECT_TRUE(differs([](Request& r) { r.device = DeviceKind::kCPU; }));
  EXPECT_TRUE(differs([](Request& r) { r.reduce_op = ReduceOp::kSum; }));
  EXPECT_TRUE(differs([](Request& r) { r.root = 0; }));
  EXPECT_TRUE(differs([](Request& r) { r.prescale = 1; }));
  EXPECT_TRUE(differs([](Request& r) { r.postscale = 1; }));
  EXPECT_TRUE(differs([](Request& r) { r.shapes[0][0] = 5; }));
  EXPECT_TRUE(differs([](Request& r) { r.splits.clear(); }));
  EXPECT_TRUE(differs([](Request& r) { r.process_set = 0; }));
  EXPECT_TRUE(differs([](Request& r) { r.wire_dtype = DataType::kFloat16; }));
}

TEST(MessageTest, OpNames) {
  EXPECT_STREQ(op_name(OpType::kAllreduce), "allreduce");
  EXPECT_STREQ(op_name(OpType::kAllgather), "allgather");
  EXPECT_STREQ(op_name(OpType::kBroadcast), "broadcast");
  EXPECT_STREQ(op_name(OpType::kAlltoall), "alltoall");
  EXPECT_STREQ(op_name(OpType::kReducescatter), "reducescatter");
  EXPECT_STREQ(op_name(OpType::kBarrier), "barrier");
  EXPECT_STREQ(op_name(OpType::kJoin), "join");
}

}  // namespace
}  // namespace kolo::core
