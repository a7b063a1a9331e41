// SummaryWriter: one TensorBoard event file, written through a buffered FILE. The bytes
// come from event_encoding.h; this file owns the file name, the directory, buffering and
// the errors (kolo::Error naming the path).
//
// Not for: what to write when (the TensorBoard callback, tensorboard.cc) or reading.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/logging.h"
#include "kolo/error.h"
#include "kolo/train/summary.h"
#include "train/summary/event_encoding.h"

namespace kolo::train {
namespace {

constexpr std::size_t kBufferBytes = 64 * 1024;

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw Error(ErrorCode::kInvalidArgument, "TensorBoard: " + what + " " + path + ": " +
                                               std::strerror(err) +
                                               "; choose a log_dir on a file system this "
                                               "process can write to, with free space");
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

struct SummaryWriter::Impl {
  std::string path;
  // setvbuf's own buffer: glibc ignores the size unless it is given the memory. Freed
  // after the destructor's fclose.
  std::unique_ptr<char[]> buffer = std::make_unique<char[]>(kBufferBytes);
  std::FILE* file = nullptr;

  // Also runs when the constructor throws after opening the file. Cannot throw: a
  // failure is logged (flush() is where callers see write errors).
  ~Impl() {
    if (file == nullptr) return;
    errno = 0;
    const bool flushed = std::fflush(file) == 0;
    const int flush_err = errno;
    const bool closed = std::fclose(file) == 0;
    if (!flushed || !closed) {
      KOLO_LOG(kError, "tensorboard")
          << "closing " << path
          << " lost its last events: " << std::strerror(flushed ? errno : flush_err);
    }
  }

  void write_event(const std::string& event) {
    const std::string bytes = events::record(event);
    errno = 0;
    if (std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size()) {
      fail("cannot write", path, errno ? errno : EIO);
    }
  }
};

SummaryWriter::SummaryWriter(const std::string& logdir) : impl_(std::make_unique<Impl>()) {
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  if (ec) fail("cannot create the log directory", logdir, ec.value());
  if (!std::filesystem::is_directory(logdir, ec))
    fail("cannot create the log directory", logdir, ENOTDIR);

  // The name TensorBoard's own writer gives (event_file_writer.py), ".v2" as TF2's; the
  // number after the pid is the first one not taken, so writers of one process (or a
  // restart within the same second) never share a file.
  const double start = now_seconds();
  char stem[64];
  std::snprintf(stem, sizeof(stem), "events.out.tfevents.%010lld.", static_cast<long long>(start));
  const std::string prefix = (std::filesystem::path(logdir) / stem).string() + host_name() + "." +
                             std::to_string(getpid()) + ".";
  int fd = -1;
  for (int n = 0; fd < 0; ++n) {
    impl_->path = prefix + std::to_string(n) + ".v2";
    fd = ::open(impl_->path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || n >= 1000)) fail("cannot create", impl_->path, errno);
  }
  impl_->file = fdopen(fd, "wb");
  if (impl_->file == nullptr) {
    const int err = errno;
    ::close(fd);
    fail("cannot open", impl_->path, err);
  }
  std::setvbuf(impl_->file, impl_->buffer.get(), _IOFBF, kBufferBytes);
  impl_->write_event(events::file_version_event(start));
  flush();  // the file is a valid, empty run from here on
}

SummaryWriter::~SummaryWriter() = default;

void SummaryWriter::add_scalar(const std::string& tag, float value, std::int64_t step,
                               double wall_time) {
  impl_->write_event(
      events::scalar_event(tag, value, step, wall_time < 0 ? now_seconds() : wall_time));
}

void SummaryWriter::add_histogram(const std::string& tag, const std::vector<double>& values,
                                  std::int64_t step, double wall_time) {
  impl_->write_event(events::histogram_event(tag, events::make_histogram(values), step,
                                             wall_time < 0 ? now_seconds() : wall_time));
}

void SummaryWriter::flush() {
  errno = 0;
  if (std::fflush(impl_->file) != 0) fail("cannot write", impl_->path, errno ? errno : EIO);
}

const std::string& SummaryWriter::path() const { return impl_->path; }

}  // namespace kolo::train
