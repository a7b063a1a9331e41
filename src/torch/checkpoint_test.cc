// save_archive / load_archive / check_archive_writable: a round trip, and every kind of
// bad file refused with an error that names it (flipped bytes inside tensor data,
// truncation, a plain libtorch archive, garbage with a valid checksum, an unwritable path).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "kolo/torch.h"

namespace kolo {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kolo_checkpoint_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    path_ = (dir_ / "ck.pt").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // 1000 float32 weights (4000 bytes of tensor data) and a step count.
  static void save(const std::string& path) {
    torch::serialize::OutputArchive archive;
    archive.write("weights", torch::arange(1000, torch::kFloat32));
    archive.write("step", torch::IValue(std::int64_t{7}));
    save_archive(archive, path);
  }

  static std::string bytes_of(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  static void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  }

  // Expects load_archive(path_) to throw a kolo::Error naming the file and `what`.
  void expect_refused(const std::string& what) {
    torch::serialize::InputArchive archive;
    try {
      load_archive(archive, path_);
      ADD_FAILURE() << "loaded " << path_;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("checkpoint " + path_ + ": "), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(CheckpointTest, RoundTripLeavesNoTempFile) {
  save(path_);
  save(path_);  // over an existing checkpoint
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
  torch::serialize::InputArchive archive;
  load_archive(archive, path_);
  torch::Tensor weights;
  archive.read("weights", weights);
  EXPECT_TRUE(torch::equal(weights, torch::arange(1000, torch::kFloat32)));
  torch::IValue step;
  archive.read("step", step);
  EXPECT_EQ(step.toInt(), 7);
}

TEST_F(CheckpointTest, FlippedBytesInTensorDataAreRefused) {
  save(path_);
  std::string bytes = bytes_of(path_);
  // The float 500.0f (0x43fa0000) is in the weights' data; flip 10 bytes starting there.
  const float marker = 500.0f;
  const std::size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&marker), 4));
  ASSERT_NE(at, std::string::npos);
  for (std::size_t i = at; i < at + 10; ++i) bytes[i] = static_cast<char>(~bytes[i]);
  write_bytes(path_, bytes);
  expect_refused("damaged: the data's CRC-32 is");
  expect_refused("restore a good copy, or remove it");
}

TEST_F(CheckpointTest, TruncatedAndForeignFilesAreRefused) {
  save(path_);
  const std::string whole = bytes_of(path_);
  write_bytes(path_, whole.substr(0, whole.size() - 100));
  expect_refused("data bytes, the header says");
  expect_refused("(truncated)");
  write_bytes(path_, whole.substr(0, 10));
  expect_refused("not a kolo checkpoint (10 bytes");
  write_bytes(path_, "hello\n");
  expect_refused("not a kolo checkpoint");
  // What fashion_mnist wrote before checkpoints had a header: libtorch's zip as it is.
  torch::serialize::OutputArchive plain;
  plain.write("weights", torch::ones({3}));
  plain.save_to(path_);
  expect_refused("a plain libtorch archive without kolo's header and checksum");
  fs::remove(path_);
  expect_refused("no such file");
}

TEST_F(CheckpointTest, GarbageWithAValidChecksumNamesTheFile) {
  // libtorch's own error ("failed finding central directory") used not to name the file.
  const std::string payload(256, 'x');
  std::string file = "KOLOCKPT";
  auto put = [&](std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) file.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(1, 4);
  put(crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), payload.size()), 4);
  put(payload.size(), 8);
  write_bytes(path_, file + payload);
  expect_refused("libtorch cannot read the archive inside");
}

TEST_F(CheckpointTest, UnwritablePathsAreRefusedUpFront) {
  check_archive_writable(path_);
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
  EXPECT_FALSE(fs::exists(path_));
  auto expect_unwritable = [](const std::string& path, const std::string& what) {
    try {
      check_archive_writable(path);
      ADD_FAILURE() << "writable: " << path;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("checkpoint " + path + ": "), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  expect_unwritable((dir_ / "missing" / "ck.pt").string(), "No such file or directory");
  write_bytes((dir_ / "file").string(), "x");
  expect_unwritable((dir_ / "file" / "ck.pt").string(), "Not a directory");
  expect_unwritable(dir_.string(), "is a directory");
  // save_archive itself says the same and leaves nothing behind.
  torch::serialize::OutputArchive archive;
  archive.write("x", torch::ones({1}));
  EXPECT_THROW(save_archive(archive, (dir_ / "missing" / "ck.pt").string()), Error);
}

}  // namespace
}  // namespace kolo
