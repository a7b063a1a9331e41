// Tests for splitting piped output into whole lines.
#include "launcher/lines.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kolo::launcher {
namespace {

TEST(LineSplitter, JoinsLinesAcrossChunksAndFlushesTheLastOne) {
  std::vector<std::string> lines;
  auto sink = [&](std::string_view l) { lines.emplace_back(l); };
  LineSplitter s;
  for (const char* chunk : {"he", "llo\nwor", "ld\n\npart", "ial"}) {
    s.feed(chunk, std::strlen(chunk), sink);
  }
  EXPECT_EQ(lines, (std::vector<std::string>{"hello", "world", ""}));
  s.flush(sink);
  EXPECT_EQ(lines.back(), "partial");
  s.flush(sink);
  EXPECT_EQ(lines.size(), 4u);
}

TEST(LineSplitter, CutsOverlongLines) {
  std::vector<std::string> lines;
  auto sink = [&](std::string_view l) { lines.emplace_back(l); };
  LineSplitter s;
  const std::string big(LineSplitter::kMaxLine + 10, 'x');
  s.feed(big.data(), big.size(), sink);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].size(), LineSplitter::kMaxLine);
  s.feed("\n", 1, sink);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], std::string(10, 'x'));
}

}  // namespace
}  // namespace kolo::launcher
