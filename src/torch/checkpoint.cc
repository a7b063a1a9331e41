// Checkpoint files: a libtorch archive framed so that a damaged file is refused, not
// loaded, and written so that a crash never leaves half a file.
//
// Layout (little-endian): 8 bytes "KOLOCKPT", u32 format version (1), u32 CRC-32 (zlib's)
// of the payload, u64 payload length, then the payload: the archive as libtorch
// serializes it (a zip file). The whole file is read and checked before libtorch sees a
// byte, so flipped or missing bytes are reported as such, naming the file, instead of
// loading wrong weights or failing deep inside libtorch's zip reader.
// Writing: common/durable_file.h (the bytes go to `path + ".tmp"`, are flushed to disk
// and renamed over `path`). Not for: which rank writes, or what the archive holds (the caller
// decides).
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/coding.h"
#include "common/durable_file.h"
#include "kolo/torch.h"

namespace kolo {
namespace {

constexpr char kMagic[8] = {'K', 'O', 'L', 'O', 'C', 'K', 'P', 'T'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 8;
const char* const kWhatToDo = "restore a good copy, or remove it to start over";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "checkpoint " + path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

std::uint32_t crc32_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  for (std::size_t left = bytes.size(); left > 0;) {
    const auto n = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    left -= n;
  }
  return static_cast<std::uint32_t>(crc);
}

// The header's fields, little-endian (common/coding.h); the caller checked the length.
void put_le(std::string& out, std::uint64_t v, int bytes) { coding::put_fixed(&out, v, bytes); }

std::uint64_t get_le(const std::string& in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  coding::ByteReader(std::string_view(in).substr(at)).get_fixed(bytes, &v);
  return v;
}

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string temp_path(const std::string& path) { return durable_temp_path(path); }

// Opens the temp file of `path` for writing (created or truncated); throws naming both.
int open_temp(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    fail(path, "is a directory; give a file name for the checkpoint");
  }
  const std::string tmp = temp_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fail(path, "cannot be written: creating " + tmp + " failed: " + errno_text() +
                   " (the checkpoint's directory must exist and be writable)");
  }
  return fd;
}

// The checked payload of `path`.
std::string read_payload(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(path, "no such file");
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not a checkpoint");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open: " + errno_text());
  std::ostringstream all;
  all << in.rdbuf();
  if (in.bad()) fail(path, "read error: " + errno_text());
  std::string bytes = std::move(all).str();
  if (bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04", 4) == 0) {
    fail(path,
         "a plain libtorch archive without kolo's header and checksum (written by an older "
         "kolo, or by torch::save), so it cannot be checked; " +
             std::string(kWhatToDo));
  }
  if (bytes.size() < kHeaderBytes || bytes.compare(0, 8, kMagic, 8) != 0) {
    fail(path, "not a kolo checkpoint (" + std::to_string(bytes.size()) +
                   " bytes without kolo's header: truncated, overwritten, or another file); " +
                   kWhatToDo);
  }
  const auto version = static_cast<std::uint32_t>(get_le(bytes, 8, 4));
  if (version != kVersion) {
    fail(path, "format version " + std::to_string(version) + ", this kolo reads version " +
                   std::to_string(kVersion));
  }
  const auto want_crc = static_cast<std::uint32_t>(get_le(bytes, 12, 4));
  const std::uint64_t want_size = get_le(bytes, 16, 8);
  const std::uint64_t size = bytes.size() - kHeaderBytes;
  if (size != want_size) {
    fail(path, "damaged: " + std::to_string(size) + " data bytes, the header says " +
                   std::to_string(want_size) + (size < want_size ? " (truncated)" : "") + "; " +
                   kWhatToDo);
  }
  bytes.erase(0, kHeaderBytes);
  const std::uint32_t crc = crc32_of(bytes);
  if (crc != want_crc) {
    fail(path, "damaged: the data's CRC-32 is " + hex(crc) + ", the header says " + hex(want_crc) +
                   " (bytes changed on disk or in a copy); " + kWhatToDo);
  }
  return bytes;
}

}  // namespace

void check_archive_writable(const std::string& path) {
  const int fd = open_temp(path);
  ::close(fd);
  std::remove(temp_path(path).c_str());
}

void save_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  std::ostringstream payload_stream;
  archive.save_to(payload_stream);
  const std::string payload = std::move(payload_stream).str();
  std::string header(kMagic, 8);
  put_le(header, kVersion, 4);
  put_le(header, crc32_of(payload), 4);
  put_le(header, payload.size(), 8);

  const Status written = write_file_durably(path, {header, payload});
  if (!written.ok()) {
    fail(path,
         written.code() == ErrorCode::kInvalidArgument
             ? "cannot be written: " + written.message()
             : "not written (the previous checkpoint, if any, is unchanged): " + written.message());
  }
}

void load_archive(torch::serialize::InputArchive& archive, const std::string& path,
                  const c10::optional<torch::Device>& device) {
  std::istringstream payload(read_payload(path));
  try {
    archive.load_from(payload, device);
  } catch (const c10::Error& e) {
    // The checksum matched, so these are the bytes that were written.
    fail(path,
         "libtorch cannot read the archive inside (written by another libtorch "
         "version?): " +
             std::string(e.what_without_backtrace()));
  }
}

}  // namespace kolo
