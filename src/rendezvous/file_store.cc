#include "rendezvous/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include "common/format.h"

namespace kolo::rendezvous {

namespace {

constexpr char kLockName[] = ".lock";
constexpr char kTempPrefix[] = ".tmp.";
// Back-off of the polls: the first pause, and the lock's (held for microseconds) longest.
constexpr double kFirstPollS = 0.001;
constexpr double kMaxLockPollS = 0.005;

std::string errno_text(int e) { return std::strerror(e); }

// An I/O failure the user can act on (permissions, a full disk, a missing mount): the
// store cannot run here.
Status io_error(const std::string& what, const std::string& path, int e) {
  return Status(ErrorCode::kUnsupported,
                "rendezvous: file store: " + what + " " + path + ": " + errno_text(e));
}

// Closes the descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, returning close()'s errno (0 on success): NFS reports write errors here.
  int close() {
    const int r = ::close(fd_);
    fd_ = -1;
    return r == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

// mkdir -p with mode 0700 for the directories it creates.
Status make_directories(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::OK();
    return io_error("cannot use", path, ENOTDIR);
  }
  const std::size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    KOLO_RETURN_IF_ERROR(make_directories(path.substr(0, slash)));
  }
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return io_error("cannot create the directory", path, errno);
  }
  return Status::OK();
}

std::string random_token() {
  std::random_device device;
  std::uint64_t bits = (std::uint64_t{device()} << 32) ^ device();
  bits ^= static_cast<std::uint64_t>(::getpid()) << 16;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i, bits >>= 4) out += kHex[bits & 15];
  return out;
}

void sleep_seconds(double s) { std::this_thread::sleep_for(seconds_duration(s)); }

// One pause of a poll that must not run past `deadline`; `interval` doubles up to `max_s`.
void pause(double* interval, double max_s, Deadline deadline) {
  const Deadline now = Clock::now();
  if (now >= deadline) return;
  const double left = std::chrono::duration<double>(deadline - now).count();
  sleep_seconds(std::min(*interval, left));
  *interval = std::min(*interval * 2, max_s);
}

}  // namespace

// The lock file, held with flock(LOCK_EX), and the store's own mutex.
class FileStore::WriteLock {
 public:
  WriteLock(std::unique_lock<std::mutex> held, int fd) : held_(std::move(held)), fd_(fd) {}
  ~WriteLock() {
    ::flock(fd_.get(), LOCK_UN);  // close() would release it too; say it
  }

 private:
  std::unique_lock<std::mutex> held_;
  Fd fd_;
};

FileStore::FileStore(std::string directory, const FileStoreOptions& options, std::string token)
    : directory_(std::move(directory)), options_(options), token_(std::move(token)) {}

Status FileStore::open(const std::string& directory, const FileStoreOptions& options,
                       std::shared_ptr<FileStore>* out) {
  if (directory.empty()) return InvalidArgument("rendezvous: file store: no directory given");
  std::string dir = directory;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  KOLO_RETURN_IF_ERROR(make_directories(dir));
  // Create the lock file now: a directory that cannot be written fails here, at once.
  const std::string lock_path = dir + "/" + kLockName;
  Fd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) return io_error("cannot create the lock file", lock_path, errno);
  out->reset(new FileStore(dir, options, random_token()));
  return Status::OK();
}

Status FileStore::file_name_of(const std::string& key, std::string* name) {
  return encode("file store", key, name);
}

Status FileStore::name_of(const std::string& key, std::string* name) const {
  return encode(describe(), key, name);
}

Status FileStore::encode(const std::string& store, const std::string& key, std::string* name) {
  KOLO_RETURN_IF_ERROR(check_key(store, key));
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const auto u = static_cast<unsigned char>(key[i]);
    const bool plain = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') ||
                       u == '_' || u == '-' || (u == '.' && i > 0);
    if (plain) {
      out += static_cast<char>(u);
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  if (out.size() > kMaxFileName) {
    return InvalidArgument("rendezvous: " + store + ": key " + quote_key(key.substr(0, 40)) +
                           "... is too long: its file name would have " +
                           std::to_string(out.size()) + " bytes, at most " +
                           std::to_string(kMaxFileName) + " are allowed; use a shorter key");
  }
  *name = std::move(out);
  return Status::OK();
}

Status FileStore::lock(std::unique_ptr<WriteLock>* out) {
  std::unique_lock<std::mutex> held(mu_);
  const std::string path = path_of(kLockName);
  // Opened afresh each time, so the lock belongs to this open file, not to the process.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return io_error("cannot open the lock file", path, errno);
  const Deadline deadline = deadline_after(options_.lock_timeout_s);
  double interval = kFirstPollS / 10;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e != EWOULDBLOCK && e != EINTR) {
      ::close(fd);
      return io_error("cannot lock", path, e);
    }
    if (Clock::now() >= deadline) {
      ::close(fd);
      return PeerFailure("rendezvous: " + describe() + ": the lock file " + path +
                         " stayed locked for " + number_string(options_.lock_timeout_s) +
                         " s; is a process of the job stopped (SIGSTOP, a debugger) or the "
                         "file system hung?");
    }
    pause(&interval, kMaxLockPollS, deadline);
  }
  *out = std::make_unique<WriteLock>(std::move(held), fd);
  return Status::OK();
}

Status FileStore::read(const std::string& key, const std::string& name, std::string* value,
                       bool* found) const {
  const std::string path = path_of(name);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) {
      *found = false;
      return Status::OK();
    }
    return io_error("cannot read key " + quote_key(key) + " from", path, errno);
  }
  std::string data;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("cannot read key " + quote_key(key) + " from", path, errno);
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
  }
  *value = std::move(data);
  *found = true;
  return Status::OK();
}

Status FileStore::write(const std::string& key, const std::string& name, const std::string& value) {
  const std::string temp =
      path_of(kTempPrefix + token_ + "." + std::to_string(temp_count_.fetch_add(1)));
  const std::string what = "cannot write key " + quote_key(key) + " to";
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0) return io_error(what, temp, errno);
  // From here on a failure removes the temporary file: no half-written value stays.
  const auto fail = [&](int e) {
    ::unlink(temp.c_str());
    return io_error(what, temp, e);
  };
  std::size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = ::write(fd.get(), value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno);
    done += static_cast<std::size_t>(n);
  }
  if (const int e = fd.close(); e != 0) return fail(e);
  const std::string path = path_of(name);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(temp.c_str());
    return io_error("cannot write key " + quote_key(key) + ": rename to", path, e);
  }
  return Status::OK();
}

Status FileStore::set(const std::string& key, const std::string& value) {
  std::string name;
  KOLO_RETURN_IF_ERROR(name_of(key, &name));
  std::unique_ptr<WriteLock> held;
  KOLO_RETURN_IF_ERROR(lock(&held));
  return write(key, name, value);
}

Status FileStore::get(const std::string& key, Deadline deadline, std::string* value) {
  std::string name;
  KOLO_RETURN_IF_ERROR(name_of(key, &name));
  const Deadline start = Clock::now();
  double interval = kFirstPollS;
  while (true) {
    bool found = false;
    KOLO_RETURN_IF_ERROR(read(key, name, value, &found));
    if (found) return Status::OK();
    if (Clock::now() >= deadline) {
      return missing_keys_error(describe(), {key}, 1,
                                std::max(deadline - start, Clock::duration::zero()));
    }
    pause(&interval, options_.max_poll_interval_s, deadline);
  }
}

Status FileStore::try_get(const std::string& key, std::string* value, bool* found) {
  std::string name;
  KOLO_RETURN_IF_ERROR(name_of(key, &name));
  return read(key, name, value, found);
}

Status FileStore::missing(const std::vector<std::string>& keys,
                          std::vector<std::string>* absent) const {
  absent->clear();
  for (const auto& key : keys) {
    std::string name;
    KOLO_RETURN_IF_ERROR(name_of(key, &name));
    const std::string path = path_of(name);
    if (::access(path.c_str(), F_OK) == 0) continue;
    if (errno != ENOENT)
      return io_error("cannot look for key " + quote_key(key) + " at", path, errno);
    absent->push_back(key);
  }
  return Status::OK();
}

Status FileStore::check(const std::vector<std::string>& keys, bool* all_exist) {
  std::vector<std::string> absent;
  KOLO_RETURN_IF_ERROR(missing(keys, &absent));
  *all_exist = absent.empty();
  return Status::OK();
}

Status FileStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  const Deadline start = Clock::now();
  double interval = kFirstPollS;
  std::vector<std::string> absent;
  while (true) {
    KOLO_RETURN_IF_ERROR(missing(keys, &absent));
    if (absent.empty()) return Status::OK();
    if (Clock::now() >= deadline) {
      return missing_keys_error(describe(), absent, keys.size(),
                                std::max(deadline - start, Clock::duration::zero()));
    }
    pause(&interval, options_.max_poll_interval_s, deadline);
  }
}

Status FileStore::add(const std::string& key, std::int64_t delta, std::int64_t* new_value) {
  std::string name;
  KOLO_RETURN_IF_ERROR(name_of(key, &name));
  std::unique_ptr<WriteLock> held;
  KOLO_RETURN_IF_ERROR(lock(&held));
  std::string current;
  bool found = false;
  KOLO_RETURN_IF_ERROR(read(key, name, &current, &found));
  KOLO_RETURN_IF_ERROR(
      add_to_counter(describe(), key, found ? &current : nullptr, delta, new_value));
  return write(key, name, std::to_string(*new_value));
}

Status FileStore::compare_set(const std::string& key, const std::string& expected,
                              const std::string& desired, std::string* actual) {
  std::string name;
  KOLO_RETURN_IF_ERROR(name_of(key, &name));
  std::unique_ptr<WriteLock> held;
  KOLO_RETURN_IF_ERROR(lock(&held));
  std::string current;
  bool found = false;
  KOLO_RETURN_IF_ERROR(read(key, name, &current, &found));
  if (found ? current != expected : !expected.empty()) {
    *actual = found ? current : std::string();
    return Status::OK();
  }
  KOLO_RETURN_IF_ERROR(write(key, name, desired));
  *actual = desired;
  return Status::OK();
}

Status FileStore::erase(const std::string& key, bool* existed) {
  std::string name;
  KOLO_RETURN_IF_ERROR(name_of(key, &name));
  std::unique_ptr<WriteLock> held;
  KOLO_RETURN_IF_ERROR(lock(&held));
  const std::string path = path_of(name);
  if (::unlink(path.c_str()) == 0) {
    *existed = true;
    return Status::OK();
  }
  if (errno != ENOENT) return io_error("cannot erase key " + quote_key(key) + " at", path, errno);
  *existed = false;
  return Status::OK();
}

}  // namespace kolo::rendezvous
