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

namespace kolo::launcher {
namespace {

struct Fed {
  std::vector<std::string> lines, redraws;
};

// Feeds `chunks` one by one, collecting lines and in-place updates.
Fed feed_all(LineSplitter* s, const std::vector<std::string>& chunks, bool flush = false) {
  Fed f;
  auto line = [&](std::string_view l) { f.lines.emplace_back(l); };
  auto redraw = [&](std::string_view l) { f.redraws.emplace_back(l); };
  for (const auto& c : chunks) s->feed(c.data(), c.size(), line, redraw);
  if (flush) s->flush(line);
  return f;
}

using Strings = std::vector<std::string>;

TEST(LineSplitter, ARedrawnLineBecomesItsLastUpdateAndEachUpdateIsShownOnce) {
  LineSplitter s;
  Fed f = feed_all(&s, {"Epoch 1/2\n", "\r1/3 [=>..]", "\r2/3 [==>.]", " - loss: 0.5",
                        "\r3/3 [====] - 1s\n", "next\n"});
  EXPECT_EQ(f.lines, (Strings{"Epoch 1/2", "3/3 [====] - 1s", "next"}));
  // A chunk that adds to the current update shows it again, longer.
  EXPECT_EQ(f.redraws, (Strings{"1/3 [=>..]", "2/3 [==>.]", "2/3 [==>.] - loss: 0.5"}));
}

TEST(LineSplitter, CarriageReturnNewlineEndsALineAndATrailingReturnIsNoUpdateYet) {
  LineSplitter s;
  Fed f = feed_all(&s, {"dos line\r", "\n", "a\rb\r\n", "x\r", "y\n"});
  EXPECT_EQ(f.lines, (Strings{"dos line", "b", "y"}));
  EXPECT_EQ(f.redraws, (Strings{}));
  // Text before the first "\r" of a line is an update like any other.
  f = feed_all(&s, {"loading\r50%", "\r"});
  EXPECT_EQ(f.redraws, (Strings{"50%"}));
  f = feed_all(&s, {"\n"});
  EXPECT_EQ(f.lines, (Strings{"50%"}));
}

TEST(LineSplitter, AnUnfinishedRedrawIsTheLastLineAtTheEndAndALoneReturnIsNone) {
  LineSplitter s;
  Fed f = feed_all(&s, {"\r1/3", "\r2/3"}, /*flush=*/true);
  EXPECT_EQ(f.lines, (Strings{"2/3"}));
  LineSplitter t;
  f = feed_all(&t, {"done\n\r"}, /*flush=*/true);
  EXPECT_EQ(f.lines, (Strings{"done"}));
}

TEST(LineSplitter, ABarRedrawnForeverHoldsOnlyItsCurrentUpdate) {
  LineSplitter s;
  Fed f;
  auto line = [&](std::string_view l) { f.lines.emplace_back(l); };
  const std::string update = "\r" + std::string(1000, '=');
  for (int i = 0; i < 200; ++i) s.feed(update.data(), update.size(), line);  // 200 KB
  EXPECT_TRUE(f.lines.empty()) << "cut into " << f.lines.size() << " pieces";
  s.feed("\n", 1, line);
  EXPECT_EQ(f.lines, (Strings{std::string(1000, '=')}));
}

TEST(LineSplitter, KeepModePassesReturnsOnAndShowsNoUpdates) {
  LineSplitter s(LineSplitter::Returns::kKeep);
  Fed f = feed_all(&s, {"\r[0] 1/3\n", "a\rb", "\n"});
  EXPECT_EQ(f.lines, (Strings{"\r[0] 1/3", "a\rb"}));
  EXPECT_EQ(f.redraws, (Strings{}));
}

struct Written {
  std::vector<std::pair<int, std::string>> writes;
  Console::Writer writer() {
    return [this](int fd, std::string_view b) { writes.emplace_back(fd, std::string(b)); };
  }
  // Everything written to `fd`, in order.
  std::string on(int fd) const {
    std::string s;
    for (const auto& [f, b] : writes) {
      if (f == fd) s += b;
    }
    return s;
  }
};

TEST(Console, OnATerminalARanksUpdatesRedrawOneLineThatItsFinalLineReplaces) {
  Written w;
  Console c(true, w.writer());
  c.line(1, 0, "[0] Epoch 1/2");
  c.redraw(1, 0, "[0] 1/3 [=>..]");
  c.redraw(1, 0, "[0] 2/3 [==>.]");
  c.line(1, 0, "[0] 3/3 [====] - 1s");
  EXPECT_EQ(w.on(1),
            "[0] Epoch 1/2\n\r[0] 1/3 [=>..]\x1b[K\r[0] 2/3 [==>.]\x1b[K\r[0] 3/3 [====] - "
            "1s\x1b[K\n");
  EXPECT_EQ(w.writes.size(), 4u);  // one write each
}

TEST(Console, AnotherRanksLineOrKolorunsMessageEndsTheRedrawnLineFirst) {
  Written w;
  Console c(true, w.writer());
  c.redraw(1, 0, "[0] 1/3");
  c.line(1, 1, "[1] hello");
  c.redraw(1, 0, "[0] 2/3");
  c.line(2, 0, "[0] a warning");  // the same rank's stderr is another line
  c.redraw(1, 0, "[0] 3/3");
  c.message(2, "kolorun: something\n");
  c.redraw(1, 2, "[2] 1/9");
  c.redraw(1, 0, "[0] 3/3");
  c.finish();
  c.finish();
  EXPECT_EQ(w.on(1),
            "\r[0] 1/3\x1b[K\n[1] hello\n\r[0] 2/3\x1b[K\n\r[0] 3/3\x1b[K\n\r[2] 1/9\x1b[K\n"
            "\r[0] 3/3\x1b[K\n");
  EXPECT_EQ(w.on(2), "[0] a warning\nkolorun: something\n");
}

TEST(Console, NotATerminalDropsUpdatesAndWritesLinesAsBefore) {
  Written w;
  Console c(false, w.writer());
  c.redraw(1, 0, "[0] 1/3");
  c.line(1, 0, "[0] 3/3");
  c.line(1, 1, "[1] x");
  c.message(2, "kolorun: y\n");
  c.finish();
  EXPECT_EQ(w.on(1), "[0] 3/3\n[1] x\n");
  EXPECT_EQ(w.on(2), "kolorun: y\n");
}

TEST(IsTerminal, TheVariableDecidesElseIsatty) {
  EXPECT_TRUE(is_terminal({{kTerminalVar, "1"}}, -1));
  EXPECT_FALSE(is_terminal({{kTerminalVar, "0"}}, -1));
  EXPECT_FALSE(is_terminal({}, -1));                       // not a descriptor
  EXPECT_FALSE(is_terminal({{kTerminalVar, "yes"}}, -1));  // only 1 and 0 count
}

}  // namespace
}  // namespace kolo::launcher
