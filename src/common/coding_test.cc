// The byte codec (coding.h): what each form writes, byte for byte, that reading gives it
// back, and that no read passes the end or allocates for a length it cannot have.
#include "common/coding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace kolo::coding {
namespace {

std::string hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

enum class Small : std::uint8_t { kA = 1, kB = 200 };

TEST(CodingTest, FixedWidthValuesAreLittleEndianInTheirOwnSize) {
  std::string out;
  put(&out, std::uint32_t{0x01020304});
  put(&out, std::int64_t{-2});
  put(&out, std::uint16_t{0xabcd});
  put(&out, Small::kB);
  put(&out, true);
  put(&out, 1.0);   // double: 0x3ff0000000000000
  put(&out, 1.0f);  // float: 0x3f800000
  EXPECT_EQ(hex(out),
            "04030201"
            "feffffffffffffff"
            "cdab"
            "c8"
            "01"
            "000000000000f03f"
            "0000803f");
}

TEST(CodingTest, WhatIsWrittenReadsBack) {
  std::string out;
  put(&out, std::int32_t{-123456});
  put(&out, std::numeric_limits<std::uint64_t>::max());
  put(&out, Small::kA);
  put(&out, false);
  put(&out, -0.25);
  put_varint(&out, 300);
  put_varint(&out, std::numeric_limits<std::uint64_t>::max());
  put_bytes<std::uint16_t>(&out, "key");
  put_bytes<std::uint32_t>(&out, std::string("\0value", 6));
  put_bytes<std::uint64_t>(&out, "");
  ByteReader r(out);
  std::int32_t i32 = 0;
  std::uint64_t u64 = 0, v1 = 0, v2 = 0;
  Small e = Small::kB;
  bool b = true;
  double d = 0;
  std::string s16, s32, s64 = "x";
  ASSERT_TRUE(r.get(&i32) && r.get(&u64) && r.get(&e) && r.get(&b) && r.get(&d));
  ASSERT_TRUE(r.get_varint(&v1) && r.get_varint(&v2));
  ASSERT_TRUE(r.get_bytes<std::uint16_t>(100, &s16) && r.get_bytes<std::uint32_t>(100, &s32) &&
              r.get_bytes<std::uint64_t>(100, &s64));
  EXPECT_TRUE(r.done());
  EXPECT_EQ(i32, -123456);
  EXPECT_EQ(u64, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(e, Small::kA);
  EXPECT_FALSE(b);
  EXPECT_EQ(d, -0.25);
  EXPECT_EQ(v1, 300u);
  EXPECT_EQ(v2, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(s16, "key");
  EXPECT_EQ(s32, std::string("\0value", 6));
  EXPECT_EQ(s64, "");
}

TEST(CodingTest, VarintsAreProtobufs) {
  std::string out;
  put_varint(&out, 0);
  put_varint(&out, 1);
  put_varint(&out, 127);
  put_varint(&out, 128);
  put_varint(&out, 300);
  EXPECT_EQ(hex(out), "00017f8001ac02");
}

TEST(CodingTest, AReadThatWouldPassTheEndFailsAndStaysPut) {
  std::string out;
  put(&out, std::uint16_t{7});
  ByteReader r(out);
  std::uint32_t u32 = 99;
  EXPECT_FALSE(r.get(&u32));
  EXPECT_EQ(u32, 99u);
  EXPECT_EQ(r.position(), 0u);
  std::uint16_t u16 = 0;
  EXPECT_TRUE(r.get(&u16));
  EXPECT_EQ(u16, 7);
  std::uint8_t u8 = 0;
  EXPECT_FALSE(r.get(&u8));
  std::uint64_t v = 0;
  EXPECT_FALSE(r.get_varint(&v));
  const std::string two_continued("\x80\x80", 2), eleven_continued(11, '\x80');
  ByteReader unterminated(two_continued);
  EXPECT_FALSE(unterminated.get_varint(&v));
  ByteReader too_long(eleven_continued);
  EXPECT_FALSE(too_long.get_varint(&v));
}

TEST(CodingTest, ALengthBeyondTheBytesLeftOrTheLimitIsRefused) {
  std::string claims_a_gigabyte;
  put(&claims_a_gigabyte, std::uint32_t{1} << 30);
  claims_a_gigabyte += "abc";
  std::string s = "untouched";
  ByteReader r(claims_a_gigabyte);
  EXPECT_FALSE(r.get_bytes<std::uint32_t>(std::size_t{1} << 31, &s));
  EXPECT_EQ(s, "untouched");
  std::string five;
  put_bytes<std::uint32_t>(&five, "12345");
  ByteReader limited(five);
  EXPECT_FALSE(limited.get_bytes<std::uint32_t>(4, &s));
  ByteReader allowed(five);
  EXPECT_TRUE(allowed.get_bytes<std::uint32_t>(5, &s));
  EXPECT_EQ(s, "12345");
}

TEST(CodingTest, ABoolIsZeroOrOne) {
  const std::string bytes("\x01\x00\x02", 3);
  ByteReader r(bytes);
  bool b = false;
  EXPECT_TRUE(r.get(&b));
  EXPECT_TRUE(b);
  EXPECT_TRUE(r.get(&b));
  EXPECT_FALSE(b);
  EXPECT_FALSE(r.get(&b));
}

}  // namespace
}  // namespace kolo::coding
