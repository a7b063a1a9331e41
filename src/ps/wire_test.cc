// The wire codec: round trips, every decode error, and a bounded fuzz of the decoder.
#include "ps/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace kolo::ps {
namespace {

WireHeader request_header() {
  WireHeader h;
  h.kind = WireKind::kRequest;
  h.request_id = 0x1122334455667788ull;
  h.deadline_ms = 12345;
  h.method = "ps.push";
  h.num_blobs = 2;
  return h;
}

Fields some_fields() {
  Fields f;
  f.set("n", std::int64_t{-7}).set("lr", 0.125).set("name", std::string("emb\0ed", 6));
  f.set("empty", std::string());
  return f;
}

std::string encoded() { return WireCodec::encode(request_header(), some_fields()); }

TEST(WireTest, RoundTripsHeaderAndFields) {
  WireHeader h;
  Fields f;
  ASSERT_TRUE(WireCodec::decode(encoded(), &h, &f).ok());
  EXPECT_EQ(h.kind, WireKind::kRequest);
  EXPECT_EQ(h.request_id, 0x1122334455667788ull);
  EXPECT_EQ(h.deadline_ms, 12345);
  EXPECT_EQ(h.method, "ps.push");
  EXPECT_EQ(h.num_blobs, 2u);
  std::int64_t n = 0;
  double lr = 0;
  std::string name, empty = "x";
  ASSERT_TRUE(f.get("n", &n).ok());
  ASSERT_TRUE(f.get("lr", &lr).ok());
  ASSERT_TRUE(f.get("name", &name).ok());
  ASSERT_TRUE(f.get("empty", &empty).ok());
  EXPECT_EQ(n, -7);
  EXPECT_EQ(lr, 0.125);
  EXPECT_EQ(name, std::string("emb\0ed", 6));
  EXPECT_EQ(empty, "");
}

TEST(WireTest, RoundTripsAReplyWithAnError) {
  WireHeader h;
  h.kind = WireKind::kReply;
  h.request_id = 9;
  h.code = ErrorCode::kMismatch;
  h.error = "variable 'w' shard 0 exists as [3, 4] float32";
  WireHeader out;
  Fields f;
  ASSERT_TRUE(WireCodec::decode(WireCodec::encode(h, Fields()), &out, &f).ok());
  EXPECT_EQ(out.kind, WireKind::kReply);
  EXPECT_EQ(out.code, ErrorCode::kMismatch);
  EXPECT_EQ(out.error, h.error);
}

TEST(WireTest, MessageRoundTripWithBlobs) {
  Message m{"ps.push"};
  m.fields = some_fields();
  m.blobs = {std::string(1000, 'a'), std::string(), std::string("\0\1\2", 3)};
  WireHeader h = request_header();
  h.num_blobs = 3;
  const std::string header = WireCodec::encode(h, m.fields);
  std::vector<std::string_view> frames{header, m.blobs[0], m.blobs[1], m.blobs[2]};
  WireHeader oh;
  Message out;
  ASSERT_TRUE(decode_message(frames, 1 << 20, &oh, &out).ok());
  EXPECT_EQ(out.method, "ps.push");
  EXPECT_EQ(out.blobs, m.blobs);
  EXPECT_EQ(wire_bytes(m), header.size() + 1003);
}

TEST(WireTest, GettersNameTheFieldAndTheType) {
  Fields f = some_fields();
  std::int64_t i = 0;
  std::string s;
  Status st = f.get("missing", &i);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'missing'"), std::string::npos) << st.message();
  st = f.get("n", &s);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'n' is an integer, not a string"), std::string::npos)
      << st.message();
  ASSERT_TRUE(f.get_or("missing", 42, &i).ok());
  EXPECT_EQ(i, 42);
  EXPECT_FALSE(f.get_or("lr", 42, &i).ok());
}

// Each broken frame and a piece of the error it must give.
void expect_refused(const std::string& frame, const std::string& why) {
  WireHeader h;
  Fields f;
  const Status s = WireCodec::decode(frame, &h, &f);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << why;
  EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
}

template <typename T>
void put(std::string& s, std::size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof(T));
}

TEST(WireTest, EveryDecodeErrorIsNamed) {
  const std::string good = encoded();
  expect_refused("", "ends inside the magic");
  std::string bad = good;
  put<std::uint32_t>(bad, 0, 0x12345678);
  expect_refused(bad, "bad magic");
  bad = good;
  put<std::uint16_t>(bad, 4, 2);
  expect_refused(bad, "wire version 2");
  bad = good;
  bad[6] = 9;
  expect_refused(bad, "unknown kind 9");
  bad = good;
  bad[7] = 100;
  expect_refused(bad, "unknown status code 100");
  expect_refused(good.substr(0, 20), "ends inside the deadline");
  // The method's length: over the limit, then past the end.
  bad = good;
  put<std::uint16_t>(bad, 24, 5000);
  expect_refused(bad, "method claims 5000 bytes, over the limit");
  bad = good.substr(0, 28);
  expect_refused(bad, "ends inside the method");
  // Offsets after the method "ps.push" (7 bytes): error length at 33, blob count at 37,
  // field count at 41, the first field at 45.
  bad = good;
  put<std::uint32_t>(bad, 33, 1u << 30);
  expect_refused(bad, "error message claims");
  bad = good;
  put<std::uint32_t>(bad, 37, kMaxBlobs + 1);
  expect_refused(bad, "blobs, over the limit");
  bad = good;
  put<std::uint32_t>(bad, 41, 1000000);
  expect_refused(bad, "1000000 fields claimed");
  bad = good;
  put<std::uint32_t>(bad, 41, 5);
  expect_refused(bad, "ends inside the field key");
  // Fields are written in key order: "empty" (string) first. Its type byte:
  bad = good;
  bad[45 + 2 + 5] = 7;
  expect_refused(bad, "unknown type 7");
  bad = good;
  put<std::uint32_t>(bad, 45 + 2 + 5 + 1, kMaxStringFieldBytes + 1);
  expect_refused(bad, "string field claims");
  expect_refused(good + "x", "1 bytes after the last field");
  expect_refused(good.substr(0, good.size() - 1), "ends inside");
  // A repeated key: two fields both named "a".
  WireHeader h;
  Fields one;
  one.set("a", std::int64_t{1});
  std::string twice = WireCodec::encode(h, one);
  const std::string field = twice.substr(twice.size() - (2 + 1 + 1 + 8));
  twice += field;
  put<std::uint32_t>(twice, twice.size() - 2 * field.size() - 4, 2);
  expect_refused(twice, "'a' appears twice");
  expect_refused(std::string(kMaxHeaderBytes + 1, '\0'), "over the limit");
}

TEST(WireTest, MessageDecodeChecksBlobCountAndSize) {
  const std::string header = encoded();  // says 2 blobs
  WireHeader h;
  Message m;
  Status s = decode_message({header}, 1 << 20, &h, &m);
  EXPECT_NE(s.message().find("says 2 blobs, 0 frames follow"), std::string::npos) << s.message();
  const std::string big(2000, 'b');
  s = decode_message({header, big, big}, 1000, &h, &m);
  EXPECT_NE(s.message().find("over the limit of 1000"), std::string::npos) << s.message();
  s = decode_message({}, 1000, &h, &m);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(decode_message({header, big, big}, 1 << 20, &h, &m).ok());
}

// Random frames and mutations of a good one: the decoder must return (ok or an error),
// never crash or allocate what a frame claims (ASan/UBSan builds run this too).
TEST(WireTest, FuzzedFramesAreRefusedOrDecoded) {
  std::mt19937_64 rng(1234);
  const std::string good = encoded();
  int ok = 0, refused = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string f;
    if (iter % 4 == 0) {
      f.resize(rng() % 128);
      for (auto& c : f) c = static_cast<char>(rng());
      if (f.size() >= 6 && iter % 8 == 0) {
        put<std::uint32_t>(f, 0, kWireMagic);
        put<std::uint16_t>(f, 4, kWireVersion);
      }
    } else {
      f = good;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) f[rng() % f.size()] = static_cast<char>(rng());
      if (iter % 3 == 0) f.resize(rng() % (f.size() + 1));
    }
    WireHeader h;
    Fields fields;
    if (WireCodec::decode(f, &h, &fields).ok()) {
      ++ok;
    } else {
      ++refused;
    }
  }
  EXPECT_GT(refused, 10000);
  EXPECT_GT(ok, 0);  // some mutations only change values
}

}  // namespace
}  // namespace kolo::ps
