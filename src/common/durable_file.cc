// write_file_durably (durable_file.h).
#include "common/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kolo {
namespace {

std::string errno_text() { return std::strerror(errno); }

// The directory holding `path` ("." for a bare name).
std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status write_file_durably(const std::string& path, const std::vector<std::string_view>& parts) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return InvalidArgument(path + " is a directory; give a file name");
  }
  const std::string tmp = durable_temp_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return InvalidArgument("creating " + tmp + " failed: " + errno_text() +
                           " (the directory must exist and be writable)");
  }
  std::string error;
  for (const std::string_view part : parts) {
    for (std::size_t done = 0; error.empty() && done < part.size();) {
      const ssize_t n = ::write(fd, part.data() + done, part.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) error = "writing " + tmp + " failed: " + errno_text();
      done += n > 0 ? static_cast<std::size_t>(n) : 0;
    }
  }
  // The data must be on disk before the rename makes it the file.
  if (error.empty() && ::fsync(fd) != 0) error = "flushing " + tmp + " failed: " + errno_text();
  // close() can report a failed delayed write (NFS, quotas): checked before the rename.
  if (::close(fd) != 0 && error.empty()) error = "closing " + tmp + " failed: " + errno_text();
  if (error.empty() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "renaming " + tmp + " to " + path + " failed: " + errno_text();
  }
  if (!error.empty()) {
    std::remove(tmp.c_str());
    return Internal(error);
  }
  // Make the rename itself durable; a failure here leaves a complete file either way.
  const int dir_fd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return Status::OK();
}

}  // namespace kolo
