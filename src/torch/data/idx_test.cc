// load_idx_images / load_idx_labels: round trips through plain and gzipped files written
// here, the real Fashion-MNIST files when installed, and the errors for bad input.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kolo/torch.h"

namespace kolo {
namespace {

namespace fs = std::filesystem;

const char* const kFashionDir = "/usr/share/datasets/fashion-mnist";

std::vector<std::uint8_t> idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out;
  auto put = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back((v >> shift) & 0xff);
  };
  put(magic);
  for (std::uint32_t d : dims) put(d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kolo_idx_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<std::uint8_t>& bytes, bool gz) {
    const std::string path = (dir_ / name).string();
    if (gz) {
      gzFile f = gzopen(path.c_str(), "wb");
      EXPECT_NE(f, nullptr);
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
    return path;
  }

  // Expects `fn` to throw kInvalidArgument with a message containing `path` and `what`.
  template <typename Fn>
  void expect_error(Fn fn, const std::string& path, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "no exception for " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  }

  fs::path dir_;
};

TEST_F(IdxTest, RoundTripPlainAndGzipped) {
  // 3 images of 2 x 4 pixels, values 0..23 then 255 at the end.
  std::vector<std::uint8_t> pixels(24);
  for (int i = 0; i < 24; ++i) pixels[i] = static_cast<std::uint8_t>(i);
  pixels[23] = 255;
  const std::vector<std::uint8_t> labels = {9, 0, 3};
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzipped" : "plain");
    const auto img_path = write(gz ? "img.gz" : "img", idx_bytes(0x803, {3, 2, 4}, pixels), gz);
    const auto lbl_path = write(gz ? "lbl.gz" : "lbl", idx_bytes(0x801, {3}, labels), gz);

    const torch::Tensor images = load_idx_images(img_path);
    EXPECT_EQ(images.sizes(), (std::vector<std::int64_t>{3, 1, 2, 4}));
    EXPECT_EQ(images.scalar_type(), torch::kFloat32);
    EXPECT_FLOAT_EQ(images[0][0][0][1].item<float>(), 1.0f / 255.0f);
    EXPECT_FLOAT_EQ(images[1][0][1][2].item<float>(), 14.0f / 255.0f);  // element 8 + 4 + 2
    EXPECT_FLOAT_EQ(images[2][0][1][3].item<float>(), 1.0f);
    EXPECT_FLOAT_EQ(images.min().item<float>(), 0.0f);

    const torch::Tensor got = load_idx_labels(lbl_path);
    EXPECT_EQ(got.scalar_type(), torch::kInt64);
    EXPECT_TRUE(torch::equal(got, torch::tensor({9, 0, 3}, torch::kInt64)));
  }
}

TEST_F(IdxTest, EmptyDatasetLoads) {
  const auto path = write("empty", idx_bytes(0x803, {0, 28, 28}, {}), false);
  EXPECT_EQ(load_idx_images(path).sizes(), (std::vector<std::int64_t>{0, 1, 28, 28}));
}

TEST_F(IdxTest, FashionMnist) {
  if (!fs::exists(kFashionDir)) GTEST_SKIP() << kFashionDir << " missing (dataset-fashion-mnist)";
  const std::string dir = kFashionDir;
  struct Split {
    const char* name;
    std::int64_t n;
  };
  for (const Split& split : {Split{"train", 60000}, Split{"t10k", 10000}}) {
    SCOPED_TRACE(split.name);
    const torch::Tensor images = load_idx_images(dir + "/" + split.name + "-images-idx3-ubyte.gz");
    const torch::Tensor labels = load_idx_labels(dir + "/" + split.name + "-labels-idx1-ubyte.gz");
    EXPECT_EQ(images.sizes(), (std::vector<std::int64_t>{split.n, 1, 28, 28}));
    EXPECT_EQ(labels.sizes(), (std::vector<std::int64_t>{split.n}));
    EXPECT_GE(images.min().item<float>(), 0.0f);
    EXPECT_LE(images.max().item<float>(), 1.0f);
    EXPECT_GT(images.mean().item<float>(), 0.1f);  // not all zeros
    EXPECT_EQ(labels.min().item<std::int64_t>(), 0);
    EXPECT_EQ(labels.max().item<std::int64_t>(), 9);
    // Fashion-MNIST is balanced: every class has n / 10 examples.
    EXPECT_TRUE(
        torch::equal(torch::bincount(labels), torch::full({10}, split.n / 10, torch::kInt64)));
  }
}

TEST_F(IdxTest, BadMagic) {
  const auto labels = write("labels", idx_bytes(0x801, {2}, {1, 2}), false);
  expect_error([&] { load_idx_images(labels); }, labels, "bad magic number 0x00000801");
  const auto images = write("images.gz", idx_bytes(0x803, {1, 1, 1}, {0}), true);
  expect_error([&] { load_idx_labels(images); }, images, "expected 0x00000801");
  const auto text = write("text", {'h', 'e', 'l', 'l', 'o', '\n'}, false);
  expect_error([&] { load_idx_labels(text); }, text, "bad magic");
}

TEST_F(IdxTest, TruncatedFiles) {
  std::vector<std::uint8_t> bytes = idx_bytes(0x803, {2, 3, 3}, std::vector<std::uint8_t>(18, 7));
  bytes.erase(bytes.end() - 5, bytes.end());  // the last 5 pixels are missing
  for (bool gz : {false, true}) {
    const auto path = write(gz ? "short.gz" : "short", bytes, gz);
    expect_error([&] { load_idx_images(path); }, path, "truncated");
  }
  const auto header = write("header", {0, 0, 8, 3, 0, 0}, false);
  expect_error([&] { load_idx_images(header); }, header, "truncated header");
  const auto tiny = write("tiny", {0, 0}, false);
  expect_error([&] { load_idx_labels(tiny); }, tiny, "too short");

  // A gzip stream cut in the middle (the decompressed part may look fine so far).
  const auto whole =
      write("whole.gz", idx_bytes(0x801, {4000}, std::vector<std::uint8_t>(4000, 3)), true);
  std::ifstream in(whole, std::ios::binary);
  std::vector<char> gz_bytes((std::istreambuf_iterator<char>(in)), {});
  gz_bytes.resize(gz_bytes.size() / 2);
  const std::string cut = (dir_ / "cut.gz").string();
  std::ofstream(cut, std::ios::binary).write(gz_bytes.data(), gz_bytes.size());
  expect_error([&] { load_idx_labels(cut); }, cut, "truncated gzip data: unexpected end of file");
}

TEST_F(IdxTest, TrailingDataAndHugeDims) {
  const auto extra = write("extra", idx_bytes(0x801, {2}, {1, 2, 3}), false);
  expect_error([&] { load_idx_labels(extra); }, extra, "trailing data");
  const auto huge =
      write("huge", idx_bytes(0x803, {0xffffffff, 0xffffffff, 0xffffffff}, {1, 2}), false);
  expect_error([&] { load_idx_images(huge); }, huge, "more than the file holds");
}

TEST_F(IdxTest, DatasetPairLoads) {
  const auto images =
      write("img.gz", idx_bytes(0x803, {3, 2, 2}, std::vector<std::uint8_t>(12)), true);
  const auto labels = write("lbl.gz", idx_bytes(0x801, {3}, {9, 0, 3}), true);
  const IdxDataset d = load_idx_dataset(images, labels, 10);
  EXPECT_EQ(d.images.sizes(), (std::vector<std::int64_t>{3, 1, 2, 2}));
  EXPECT_TRUE(torch::equal(d.labels, torch::tensor({9, 0, 3}, torch::kInt64)));
  const auto none = write("none", idx_bytes(0x803, {0, 2, 2}, {}), false);
  const auto no_labels = write("no_labels", idx_bytes(0x801, {0}, {}), false);
  EXPECT_EQ(load_idx_dataset(none, no_labels, 10).labels.size(0), 0);  // empty is the caller's call
}

TEST_F(IdxTest, DatasetWithFewerLabelsThanImagesNamesBothFilesAndCounts) {
  // 6 images, 2 labels: used to train on the first 2 images without a word.
  const auto images = write("img", idx_bytes(0x803, {6, 1, 1}, {1, 2, 3, 4, 5, 6}), false);
  const auto labels = write("lbl", idx_bytes(0x801, {2}, {1, 2}), false);
  expect_error([&] { load_idx_dataset(images, labels, 10); }, images, "(6 images)");
  expect_error([&] { load_idx_dataset(images, labels, 10); }, labels, "(2 labels) do not match");
  expect_error([&] { load_idx_dataset(images, labels, 10); }, labels, "same split");
}

TEST_F(IdxTest, DatasetLabelOutOfRangeNamesValueAndIndex) {
  const auto images = write("img", idx_bytes(0x803, {4, 1, 1}, {1, 2, 3, 4}), false);
  const auto labels = write("lbl", idx_bytes(0x801, {4}, {9, 0, 200, 10}), false);
  expect_error([&] { load_idx_dataset(images, labels, 10); }, labels,
               "label 200 at index 2 is not a class of 10 (labels must be 0..9; 2 of 4 labels");
  EXPECT_NO_THROW(load_idx_dataset(images, labels, 201));
  expect_error([&] { load_idx_dataset(images, labels, 0); }, "load_idx_dataset", "num_classes");
}

TEST_F(IdxTest, MissingFileMentionsTheDebianPackage) {
  const std::string path = (dir_ / "nope-images-idx3-ubyte.gz").string();
  expect_error([&] { load_idx_images(path); }, path, "/usr/share/datasets/fashion-mnist");
  expect_error([&] { load_idx_labels(path); }, path, "dataset-fashion-mnist");
}

}  // namespace
}  // namespace kolo
