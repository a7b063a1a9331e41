// Tests of the event-file writer (summary.h, event_encoding.h): CRC-32C vectors, the
// records of the reference facts byte for byte, files read back by an independent reader
// (testing/event_reader.h), histograms, and errors naming the path. The callback's tests:
// tensorboard_test.cc.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "kolo/error.h"
#include "kolo/train/summary.h"
#include "train/summary/event_encoding.h"
#include "train/testing/event_reader.h"
#include "train/testing/temp_dir.h"

namespace kolo::train {
namespace {

namespace fs = std::filesystem;
using kolo::testing::read_event_file;
using kolo::testing::ReadEvent;

std::string from_hex(std::string hex) {
  std::string out;
  hex.erase(std::remove(hex.begin(), hex.end(), ' '), hex.end());
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

double now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Records of the reference facts (section 5.2), computed with a separate Python script.
const char* kFileVersionRecord =
    "1800000000000000 a37f4b22 0900000040fc54d941 1a0d 627261696e2e4576656e743a32 eced8f9d";
const char* kScalarRecord =
    "1a00000000000000 129bd82d 0900004040fc54d941 1001 2a0d 0a0b 0a046c6f7373 15 0000003f "
    "97d67404";

using TempDir = kolo::testing::TempDirTest;

// --- CRC-32C -----------------------------------------------------------------------------

TEST(Crc32c, KnownVectorsAndTheMask) {
  const std::string digits = "123456789";
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  const std::pair<std::string, std::uint32_t> vectors[] = {{digits, 0xE3069283},
                                                           {zeros, 0x8A9136AA},
                                                           {ones, 0x62A8AB43},
                                                           {ascending, 0x46DD794E},
                                                           {"", 0x00000000}};
  for (const auto& [bytes, crc] : vectors) {
    EXPECT_EQ(crc32c(bytes.data(), bytes.size()), crc) << to_hex(bytes);
    // The reader's own CRC agrees, so it can check the writer's framing.
    EXPECT_EQ(kolo::testing::reader_crc32c(bytes), crc) << to_hex(bytes);
  }

  // The mask: rotate right by 15 bits, add a constant.
  const std::uint32_t c = 0xE3069283;
  EXPECT_EQ(masked_crc32c(digits.data(), digits.size()), ((c >> 15) | (c << 17)) + 0xA282EAD8u);
  // The header CRC of the facts' first record: the length 24 as 8 little-endian bytes.
  const std::string length = from_hex("1800000000000000");
  EXPECT_EQ(masked_crc32c(length.data(), length.size()), 0x224B7FA3u);
}

// --- Records byte for byte ---------------------------------------------------------------

TEST(EventEncoding, RecordsMatchTheReferenceByteForByte) {
  EXPECT_EQ(to_hex(events::record(events::file_version_event(1700000000.0))),
            to_hex(from_hex(kFileVersionRecord)));
  EXPECT_EQ(to_hex(events::record(events::scalar_event("loss", 0.5f, 1, 1700000001.0))),
            to_hex(from_hex(kScalarRecord)));
}

TEST_F(TempDir, WriterFileHoldsTheFileVersionThenTheReferenceScalarRecord) {
  const double before = now();
  std::string path;
  {
    SummaryWriter writer(dir_);
    path = writer.path();
    writer.add_scalar("loss", 0.5f, 1, 1700000001.0);
  }
  const std::string bytes = file_bytes(path);
  ASSERT_EQ(bytes.size(), 40u + 42u);
  EXPECT_EQ(to_hex(bytes.substr(40)), to_hex(from_hex(kScalarRecord)));

  const std::vector<ReadEvent> events = read_event_file(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].step, 0);
  EXPECT_FALSE(events[0].has_summary);
  EXPECT_GE(events[0].wall_time, std::floor(before));
  EXPECT_LE(events[0].wall_time, now());
  ASSERT_EQ(events[1].values.size(), 1u);
  EXPECT_EQ(events[1].values[0].tag, "loss");
  EXPECT_EQ(events[1].values[0].simple_value, 0.5f);
  EXPECT_EQ(events[1].step, 1);
  EXPECT_EQ(events[1].wall_time, 1700000001.0);
  EXPECT_EQ(events[1].unknown_fields, 0);
}

TEST_F(TempDir, FileNameIsTensorBoardsAndEachWriterGetsItsOwnFile) {
  SummaryWriter a(dir_ + "/nested/run");  // parents are created
  SummaryWriter b(dir_ + "/nested/run");
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::regex name("events\\.out\\.tfevents\\.[0-9]{10}\\." + std::string(host) + "\\." +
                        std::to_string(getpid()) + "\\.[0-9]+\\.v2");
  for (const SummaryWriter* w : {&a, &b}) {
    EXPECT_EQ(fs::path(w->path()).parent_path(), fs::path(dir_ + "/nested/run"));
    EXPECT_TRUE(std::regex_match(fs::path(w->path()).filename().string(), name)) << w->path();
  }
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(kolo::testing::event_files(dir_ + "/nested/run").size(), 2u);
}

TEST_F(TempDir, ScalarsRoundTripAnyStepAndZero) {
  std::string path;
  {
    SummaryWriter writer(dir_);
    path = writer.path();
    writer.add_scalar("a", 0.0f, 0);
    writer.add_scalar("a", -1.25f, -5);
    writer.add_scalar("b", 3e38f, std::int64_t{1} << 40);
    writer.flush();
    // Flushed: readable before the writer closes.
    EXPECT_EQ(read_event_file(path).size(), 4u);
  }
  const auto events = read_event_file(path);
  using Points = std::vector<std::pair<std::int64_t, float>>;
  EXPECT_EQ(kolo::testing::scalars(events, "a"), (Points{{0, 0.0f}, {-5, -1.25f}}));
  EXPECT_EQ(kolo::testing::scalars(events, "b"), (Points{{std::int64_t{1} << 40, 3e38f}}));
  for (std::size_t i = 1; i < events.size(); ++i) {
    EXPECT_GE(events[i].wall_time, events[0].wall_time);
  }
}

// --- The reader really checks ------------------------------------------------------------

TEST_F(TempDir, ReaderRefusesDamagedFiles) {
  std::string path;
  {
    SummaryWriter writer(dir_);
    path = writer.path();
    writer.add_scalar("loss", 0.5f, 1, 1700000001.0);
  }
  const std::string good = file_bytes(path);
  auto expect_refused = [&](std::string bytes, const std::string& why) {
    write_bytes(path, bytes);
    try {
      read_event_file(path);
      ADD_FAILURE() << "accepted a file with " << why;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  std::string bytes = good;
  bytes[40 + 12 + 20] ^= 1;  // inside the scalar Event
  expect_refused(bytes, "failed event crc32 check");
  bytes = good;
  bytes[40] ^= 1;  // the scalar record's length
  expect_refused(bytes, "failed header crc32 check");
  expect_refused(good.substr(0, good.size() - 1), "truncated");
  expect_refused(good.substr(0, 45), "truncated header");
}

// --- Histograms --------------------------------------------------------------------------

TEST(Histogram, DefaultBucketsAreTensorFlows) {
  const std::vector<double>& limits = events::default_bucket_limits();
  ASSERT_EQ(limits.size(), 1551u);  // 774 edges 1e-12 * 1.1^k below 1e20 each side, +-DBL_MAX, 0
  const std::size_t mid = limits.size() / 2;
  EXPECT_EQ(limits.front(), -DBL_MAX);
  EXPECT_EQ(limits.back(), DBL_MAX);
  EXPECT_EQ(limits[mid], 0.0);
  EXPECT_EQ(limits[mid + 1], 1e-12);
  EXPECT_EQ(limits[mid + 2], 1e-12 * 1.1);
  EXPECT_LT(limits[limits.size() - 2], 1e20);
  EXPECT_GE(limits[limits.size() - 2] * 1.1, 1e20);
  for (std::size_t i = 0; i < limits.size(); ++i) {
    EXPECT_EQ(limits[i], -limits[limits.size() - 1 - i]);
    if (i > 0) {
      EXPECT_LT(limits[i - 1], limits[i]);
    }
  }
}

// The bucket limit that closes the bucket of `v`: the first default edge above it.
double limit_above(double v) {
  const auto& limits = events::default_bucket_limits();
  return *std::upper_bound(limits.begin(), limits.end(), v);
}

void expect_well_formed(const events::Histogram& h) {
  ASSERT_EQ(h.bucket.size(), h.bucket_limit.size());
  ASSERT_FALSE(h.bucket.empty());
  EXPECT_EQ(h.bucket_limit.back(), DBL_MAX);
  double total = 0;
  for (std::size_t i = 0; i < h.bucket.size(); ++i) {
    total += h.bucket[i];
    if (i > 0) {
      EXPECT_LT(h.bucket_limit[i - 1], h.bucket_limit[i]);
      EXPECT_FALSE(h.bucket[i - 1] == 0 && h.bucket[i] == 0) << "empty run not merged at " << i;
    }
  }
  EXPECT_EQ(total, h.num);
}

TEST(Histogram, StatisticsAndBucketsOfAnyInput) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  const events::Histogram h = events::make_histogram({0.5, -2, 3, nan, 3, inf, -inf, 0});
  EXPECT_EQ(h.min, -2);
  EXPECT_EQ(h.max, 3);
  EXPECT_EQ(h.num, 5);  // NaN and +-inf left out
  EXPECT_EQ(h.sum, 4.5);
  EXPECT_EQ(h.sum_squares, 0.25 + 4 + 9 + 9);
  expect_well_formed(h);
  std::vector<std::pair<double, double>> filled;
  for (std::size_t i = 0; i < h.bucket.size(); ++i) {
    if (h.bucket[i] > 0) filled.emplace_back(h.bucket_limit[i], h.bucket[i]);
  }
  const std::vector<std::pair<double, double>> expected = {
      {limit_above(-2), 1}, {1e-12, 1}, {limit_above(0.5), 1}, {limit_above(3), 2}};
  EXPECT_EQ(filled, expected);
  // Each value lies in [previous limit, its limit).
  EXPECT_LT(-2, limit_above(-2));
  EXPECT_LE(limit_above(0.5) / 1.1, 0.5 * (1 + 1e-12));

  // A known C++ writer updates min only when a value is not a new max ("else if"): one
  // value, or ascending input, left min at DBL_MAX.
  for (const std::vector<double>& values :
       {std::vector<double>{7}, std::vector<double>{1, 2, 3}, std::vector<double>{3, 2, 1},
        std::vector<double>{-1, -1}}) {
    const events::Histogram few = events::make_histogram(values);
    EXPECT_EQ(few.min, *std::min_element(values.begin(), values.end()));
    EXPECT_EQ(few.max, *std::max_element(values.begin(), values.end()));
    EXPECT_EQ(few.num, static_cast<double>(values.size()));
    expect_well_formed(few);
  }

  const events::Histogram big = events::make_histogram({DBL_MAX, -DBL_MAX, 1e30});
  EXPECT_EQ(big.min, -DBL_MAX);
  EXPECT_EQ(big.max, DBL_MAX);
  expect_well_formed(big);
  EXPECT_EQ(big.bucket.back(), 2);  // 1e30 and DBL_MAX: the last bucket, past 1e20

  const events::Histogram none = events::make_histogram({std::nan("")});
  EXPECT_EQ(none.num, 0);
  EXPECT_EQ(none.min, 0);
  EXPECT_EQ(none.max, 0);
  EXPECT_EQ(none.bucket_limit, std::vector<double>{DBL_MAX});
  EXPECT_EQ(none.bucket, std::vector<double>{0});
}

TEST_F(TempDir, HistogramReadsBackFieldByField) {
  const std::vector<double> values = {0.5, -2, 3, 3, 1e-3, 42};
  std::string path;
  {
    SummaryWriter writer(dir_);
    path = writer.path();
    writer.add_histogram("fc1/weight/histogram", values, 3, 1700000002.0);
  }
  const auto events = read_event_file(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step, 3);
  EXPECT_EQ(events[1].wall_time, 1700000002.0);
  ASSERT_EQ(events[1].values.size(), 1u);
  const auto& v = events[1].values[0];
  EXPECT_EQ(v.tag, "fc1/weight/histogram");
  EXPECT_FALSE(v.simple_value.has_value());
  ASSERT_TRUE(v.histo.has_value());
  const events::Histogram expected = events::make_histogram(values);
  EXPECT_EQ(v.histo->min, -2);
  EXPECT_EQ(v.histo->max, 42);
  EXPECT_EQ(v.histo->num, 6);
  EXPECT_EQ(v.histo->sum, 0.5 - 2 + 3 + 3 + 1e-3 + 42);
  EXPECT_EQ(v.histo->sum_squares, 0.25 + 4 + 9 + 9 + 1e-6 + 42 * 42);
  EXPECT_EQ(v.histo->bucket_limit, expected.bucket_limit);
  EXPECT_EQ(v.histo->bucket, expected.bucket);
}

// --- Errors name the path ----------------------------------------------------------------

void expect_error_naming(const std::function<void()>& f, const std::string& path,
                         const std::string& why) {
  try {
    f();
    ADD_FAILURE() << "no kolo::Error for " << path;
  } catch (const kolo::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
  }
}

TEST_F(TempDir, LogDirThatCannotBeCreatedThrowsNamingIt) {
  fs::create_directories(dir_);
  write_bytes(dir_ + "/file", "not a directory");
  expect_error_naming([&] { SummaryWriter w(dir_ + "/file/train"); }, dir_ + "/file/train",
                      "cannot create the log directory");
  expect_error_naming([&] { SummaryWriter w(dir_ + "/file"); }, dir_ + "/file",
                      "cannot create the log directory");
}

// The next two change process limits, so they run in a child (a death test, forked: it
// only creates and writes files) that exits 0 when the error was as expected. Each puts
// the limit back and removes its directory before it exits (the child skips TearDown).
int create_with_no_file_descriptors(const std::string& dir) {
  fs::create_directories(dir);
  rlimit old{};
  getrlimit(RLIMIT_NOFILE, &old);
  // UBSan's vptr check (the ASan+UBSan build) looks a type up once per process and reads
  // the vtable through a pipe to see that it is readable; with no descriptors the pipe
  // fails and the first kolo::Error made below is reported as an "invalid vptr" (seen
  // when ctest runs this test alone). Making one here puts kolo::Error in its cache.
  (void)Error(ErrorCode::kInternal, "").code();
  const rlimit none{0, old.rlim_max};
  setrlimit(RLIMIT_NOFILE, &none);  // every open() fails with EMFILE
  int code = 2;
  try {
    SummaryWriter w(dir);
  } catch (const kolo::Error& e) {
    const std::string m = e.what();
    code = m.find("cannot create " + dir + "/events.out.tfevents.") != std::string::npos &&
                   m.find("Too many open files") != std::string::npos
               ? 0
               : 1;
    if (code != 0) std::fprintf(stderr, "%s\n", m.c_str());
  }
  setrlimit(RLIMIT_NOFILE, &old);
  fs::remove_all(dir);
  return code;
}

int write_past_the_file_size_limit(const std::string& dir) {
  std::signal(SIGXFSZ, SIG_IGN);  // past the limit write() fails with EFBIG instead
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  const rlimit small{1000, old.rlim_max};
  setrlimit(RLIMIT_FSIZE, &small);
  int code = 2;
  {
    SummaryWriter w(dir);
    try {
      for (int i = 0; i < 100; ++i) w.add_scalar("loss", 1.0f, i);  // ~5 KB, buffered
      w.flush();                                                    // meets the limit
    } catch (const kolo::Error& e) {
      const std::string m = e.what();
      code = m.find("cannot write " + w.path()) != std::string::npos &&
                     m.find("File too large") != std::string::npos
                 ? 0
                 : 1;
      if (code != 0) std::fprintf(stderr, "%s\n", m.c_str());
    }
  }  // the destructor's failed flush is logged, not thrown
  setrlimit(RLIMIT_FSIZE, &old);
  fs::remove_all(dir);
  return code;
}

TEST_F(TempDir, EventFileThatCannotBeCreatedThrowsNamingIt) {
  EXPECT_EXIT(std::_Exit(create_with_no_file_descriptors(dir_)), ::testing::ExitedWithCode(0), "");
}

TEST_F(TempDir, FailedWriteThrowsNamingTheFile) {
  EXPECT_EXIT(std::_Exit(write_past_the_file_size_limit(dir_)), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kolo::train
