// The TCP store's frames: round trips, every limit, and a corpus-free fuzz (random and
// mutated frames never crash the decoder and never yield a message it would not encode).
#include "rendezvous/tcp_store_wire.h"

#include <gtest/gtest.h>

#include <random>

namespace kolo::rendezvous::wire {
namespace {

Message sample() {
  Message m;
  m.op = Op::kCompareSet;
  m.code = 5;
  m.flag = 1;
  m.number = -1234567890123;
  m.keys = {"rank/0", std::string("a\0b", 3)};
  m.value = std::string("\xff\x00 value", 8);
  m.detail = "desired";
  return m;
}

std::string frame_of(const Message& m) {
  std::string f;
  EXPECT_TRUE(encode(m, &f).ok());
  return f;
}

TEST(TcpStoreWire, RoundTripsEveryField) {
  std::string buffer = frame_of(sample()) + frame_of(Message{});
  std::vector<Message> got;
  ASSERT_TRUE(extract(&buffer, &got).ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], sample());
  EXPECT_EQ(got[1], Message{});
  EXPECT_TRUE(buffer.empty());
}

TEST(TcpStoreWire, APartialFrameWaitsForTheRest) {
  const std::string f = frame_of(sample());
  std::string buffer;
  std::vector<Message> got;
  for (std::size_t i = 0; i < f.size(); ++i) {  // one byte at a time, as a slow socket
    buffer.push_back(f[i]);
    ASSERT_TRUE(extract(&buffer, &got).ok()) << i;
    EXPECT_EQ(got.size(), i + 1 == f.size() ? 1u : 0u) << i;
  }
  EXPECT_EQ(got[0], sample());
}

Status decode(std::string buffer) {
  std::vector<Message> got;
  return extract(&buffer, &got);
}

TEST(TcpStoreWire, RefusesWhatBreaksTheFormat) {
  const std::string good = frame_of(sample());
  std::string f = good;
  f[4] = 'X';
  EXPECT_NE(decode(f).message().find("wrong magic"), std::string::npos);
  f = good;
  f[6] = 9;
  EXPECT_NE(decode(f).message().find("version 9, this build speaks 1"), std::string::npos);
  f = good;
  f[7] = 0;
  EXPECT_NE(decode(f).message().find("unknown op 0"), std::string::npos);
  f = good;
  f[7] = kLastOp + 1;
  EXPECT_EQ(decode(f).code(), ErrorCode::kInvalidArgument);
  // A longer body than its fields: trailing bytes.
  f = good + "xy";
  f[0] = static_cast<char>(f[0] + 2);
  EXPECT_NE(decode(f).message().find("2 trailing bytes"), std::string::npos) << decode(f).message();
  // A field length past the end of the body.
  f = good;
  f[4 + 4 + 2 + 8 + 4] = static_cast<char>(0x7f);  // the first key's length
  EXPECT_EQ(decode(f).code(), ErrorCode::kInvalidArgument);
  // More keys than the body has bytes for: refused before room is made for them.
  f = good;
  f[4 + 4 + 2 + 8] = 0;  // the key count (sample() has 2): 65536, the limit
  f[4 + 4 + 2 + 8 + 1] = 0;
  f[4 + 4 + 2 + 8 + 2] = 1;
  EXPECT_NE(decode(f).message().find("65536 keys in the"), std::string::npos)
      << decode(f).message();
  // An oversized frame is refused from its length alone, before any body arrives.
  std::string big(4, '\0');
  const std::uint32_t n = kMaxFrameBytes + 1;
  for (int i = 0; i < 4; ++i) big[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  EXPECT_NE(decode(big).message().find("over the limit of 67108864"), std::string::npos);
}

TEST(TcpStoreWire, LimitsHoldOnBothSides) {
  Message m;
  m.keys = {std::string(kMaxKeyBytes, 'k')};
  std::string f;
  ASSERT_TRUE(encode(m, &f).ok());
  ASSERT_TRUE(decode(f).ok());
  m.keys[0].push_back('k');
  EXPECT_NE(encode(m, &f).message().find("4097 bytes, over the limit of 4096"), std::string::npos);
  // A peer that encodes a longer key anyway is refused by the decoder.
  m.keys[0] = std::string(kMaxKeyBytes, 'k');
  ASSERT_TRUE(encode(m, &f).ok());
  const std::size_t at = 4 + 4 + 2 + 8 + 4;  // the key's length field
  const std::uint32_t len = kMaxKeyBytes + 1;
  for (int i = 0; i < 4; ++i) f[at + i] = static_cast<char>((len >> (8 * i)) & 0xff);
  f.insert(at + 4, "k");
  const std::uint32_t body = static_cast<std::uint32_t>(f.size() - 4);
  for (int i = 0; i < 4; ++i) f[i] = static_cast<char>((body >> (8 * i)) & 0xff);
  EXPECT_NE(decode(f).message().find("over 4096 bytes"), std::string::npos) << decode(f).message();
  Message v;
  v.value.assign(kMaxFrameBytes, 'v');
  EXPECT_NE(encode(v, &f).message().find("keep values small"), std::string::npos);
}

// Fuzz without a corpus: random bytes, and valid frames with random bytes flipped,
// inserted, dropped or cut. The decoder must return (no crash, no hang; the sanitizer
// builds catch reads out of bounds), and whatever it accepts must encode back to itself.
TEST(TcpStoreWire, RandomAndMutatedFramesNeverBreakTheDecoder) {
  std::mt19937 rng(20261201);
  auto byte = [&] { return static_cast<char>(rng() & 0xff); };
  const std::string seed = frame_of(sample()) + frame_of(Message{});
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string f;
    if (round % 4 == 0) {
      f.resize(rng() % 64);
      for (auto& c : f) c = byte();
    } else {
      f = seed;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !f.empty(); ++e) {
        const std::size_t at = rng() % f.size();
        switch (rng() % 4) {
          case 0:
            f[at] = byte();
            break;
          case 1:
            f.insert(f.begin() + static_cast<std::ptrdiff_t>(at), byte());
            break;
          case 2:
            f.erase(at, 1);
            break;
          case 3:
            f.resize(at);
            break;
        }
      }
    }
    std::string buffer = f;
    std::vector<Message> got;
    const Status s = extract(&buffer, &got);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
    }
    EXPECT_LE(buffer.size(), f.size());
    for (const auto& m : got) {
      ++accepted;
      std::string again;
      ASSERT_TRUE(encode(m, &again).ok());
      std::string b2 = again;
      std::vector<Message> back;
      ASSERT_TRUE(extract(&b2, &back).ok());
      ASSERT_EQ(back.size(), 1u);
      EXPECT_EQ(back[0], m);
    }
  }
  EXPECT_GT(accepted, 0);  // the mutations also reach the field decoders, not only the magic
}

}  // namespace
}  // namespace kolo::rendezvous::wire
