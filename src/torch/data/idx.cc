// Reader for MNIST-format IDX files (MNIST, Fashion-MNIST), gzipped or plain, into torch
// tensors. Only the unsigned-byte variants these datasets use are supported: images
// (magic 0x00000803, dims N x rows x cols) and labels (magic 0x00000801, dims N).
// Not a general IDX reader (other element types and ranks are rejected).
//
// Layout: 4-byte big-endian magic (0, 0, element type 0x08, number of dims), one 4-byte
// big-endian size per dim, then the elements in row-major order. The whole file is
// decompressed first so that its length can be checked against the header.
// load_idx_dataset also checks that an images file and a labels file belong together
// (one label per image, every label a class of the model).
#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kolo/torch.h"

namespace kolo {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;
constexpr std::uint32_t kLabelsMagic = 0x00000801;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "IDX file " + path + ": " + what);
}

bool is_gzip(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  unsigned char magic[2] = {0, 0};
  const bool gz = std::fread(magic, 1, 2, f) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  std::fclose(f);
  return gz;
}

// zlib's error text without the "<path>: " it puts in front.
std::string gz_message(gzFile file, const std::string& path, int* code) {
  std::string msg = gzerror(file, code);
  if (msg.rfind(path + ": ", 0) == 0) msg.erase(0, path.size() + 2);
  return msg;
}

// The decompressed contents of `path` (zlib reads plain files through as they are).
std::vector<std::uint8_t> read_all(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    fail(path,
         "no such file (Debian's dataset-fashion-mnist package installs the "
         "Fashion-MNIST files in /usr/share/datasets/fashion-mnist)");
  }
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not a file");
  const bool gz = is_gzip(path);
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) fail(path, std::string("cannot open: ") + std::strerror(errno));

  std::vector<std::uint8_t> data;
  constexpr unsigned kChunk = 1 << 20;
  for (;;) {
    const std::size_t old_size = data.size();
    data.resize(old_size + kChunk);
    const int n = gzread(file, data.data() + old_size, kChunk);
    if (n < 0) {
      int code = 0;
      const std::string msg = gz_message(file, path, &code);
      gzclose(file);
      fail(path, std::string(gz ? "corrupt gzip data: " : "read error: ") + msg);
    }
    data.resize(old_size + static_cast<std::size_t>(n));
    if (n == 0) break;
  }
  // A gzip stream cut short reads as a short file plus an error state.
  int code = Z_OK;
  const std::string msg = gz_message(file, path, &code);
  gzclose(file);
  if (code != Z_OK && code != Z_STREAM_END) {
    fail(path, std::string(gz ? "corrupt or truncated gzip data: " : "read error: ") + msg);
  }
  return data;
}

std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Validates the header against `want_magic` and the file length; returns the data as a
// uint8 tensor shaped by the header's dims.
torch::Tensor load_u8(const std::string& path, std::uint32_t want_magic, const char* kind) {
  std::vector<std::uint8_t> bytes = read_all(path);
  if (bytes.size() < 4) {
    fail(path, "too short for an IDX header (" + std::to_string(bytes.size()) + " bytes)");
  }
  const std::uint32_t magic = big_endian_u32(bytes.data());
  if (magic != want_magic) {
    fail(path, "bad magic number " + hex(magic) + ", expected " + hex(want_magic) + " for " + kind +
                   " (is this the right file?)");
  }
  const std::size_t ndims = want_magic & 0xff;
  const std::size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) {
    fail(path, "truncated header: " + std::to_string(bytes.size()) + " bytes, need " +
                   std::to_string(header) + " for " + std::to_string(ndims) + " dims");
  }
  std::vector<std::int64_t> dims;
  std::string dims_text;
  const std::size_t payload = bytes.size() - header;
  std::size_t expected = 1;
  bool too_big = false;
  for (std::size_t i = 0; i < ndims; ++i) {
    const std::uint32_t d = big_endian_u32(bytes.data() + 4 + 4 * i);
    dims.push_back(d);
    dims_text += (i ? " x " : "") + std::to_string(d);
    // Stop multiplying once past the payload: avoids overflow on nonsense headers.
    if (d != 0 && expected > payload / d) too_big = true;
    if (!too_big) expected *= d;
  }
  if (too_big || expected != payload) {
    fail(path, "header says " + dims_text + " (" +
                   (too_big ? std::string("more than the file holds")
                            : std::to_string(expected) + " bytes") +
                   ") but the file has " + std::to_string(payload) + " data bytes" +
                   (too_big || expected > payload ? " (truncated?)" : " (trailing data)"));
  }
  return torch::from_blob(bytes.data() + header, dims, torch::kUInt8).clone();
}

}  // namespace

torch::Tensor load_idx_images(const std::string& path) {
  torch::Tensor u8 = load_u8(path, kImagesMagic, "images");
  return u8.unsqueeze(1).to(torch::kFloat32).div_(255.0f);
}

torch::Tensor load_idx_labels(const std::string& path) {
  return load_u8(path, kLabelsMagic, "labels").to(torch::kInt64);
}

IdxDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                            std::int64_t num_classes) {
  if (num_classes < 1 || num_classes > 256) {
    throw Error(ErrorCode::kInvalidArgument,
                "load_idx_dataset: num_classes must be 1..256 (IDX labels are bytes), got " +
                    std::to_string(num_classes));
  }
  IdxDataset d{load_idx_images(images_path), load_idx_labels(labels_path)};
  const std::int64_t images = d.images.size(0), labels = d.labels.size(0);
  if (images != labels) {
    // Training on the first min(images, labels) would go on silently with the wrong data.
    throw Error(ErrorCode::kInvalidArgument,
                "IDX files " + images_path + " (" + std::to_string(images) + " images) and " +
                    labels_path + " (" + std::to_string(labels) +
                    " labels) do not match: every image needs exactly one label; check that "
                    "both files are complete and of the same split (train or t10k)");
  }
  const torch::Tensor bad = d.labels.ge(num_classes);
  const std::int64_t bad_count = bad.sum().item<std::int64_t>();
  if (bad_count > 0) {
    const std::int64_t first = bad.nonzero()[0][0].item<std::int64_t>();
    throw Error(ErrorCode::kInvalidArgument,
                "IDX file " + labels_path + ": label " +
                    std::to_string(d.labels[first].item<std::int64_t>()) + " at index " +
                    std::to_string(first) + " is not a class of " + std::to_string(num_classes) +
                    " (labels must be 0.." + std::to_string(num_classes - 1) + "; " +
                    std::to_string(bad_count) + " of " + std::to_string(labels) +
                    " labels are out of range); is this the labels file of another dataset?");
  }
  return d;
}

}  // namespace kolo
