// Creation, mapping and liveness locks of the shm transport's segment (shm_segment.h).
//
// Not for: what lives in the segment beyond its header (the communicator's business).
#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include "common/logging.h"

namespace kolo::transport::shm {
namespace {

constexpr std::uint64_t kMagic = 0x316d68736f6c6f6bull;  // "kolos hm1", little-endian
constexpr std::uint32_t kVersion = 5;                    // 5: a 16-line Abort
// The regions are reserved in steps of this many bytes, so that closing the segment
// abandons the rest within one step.
constexpr std::size_t kReserveStep = 16 << 20;
constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

std::string errno_text(int e) { return std::string(std::strerror(e)); }

std::string mib(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

std::string random_name() {
  std::random_device rd;
  const std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char text[64];
  std::snprintf(text, sizeof text, "/kolo-%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(r));
  return text;
}

}  // namespace

Layout Layout::compute(int size, std::size_t region_bytes) {
  Layout l;
  l.size = size;
  l.region_bytes = region_bytes;
  l.slots = (3 + kAbortLines) * kLine;  // Meta, Wake, Abort, a spare line
  l.control = l.slots + kLine * static_cast<std::size_t>(size);
  l.small = round_up(l.control + 2 * kControlBytes * static_cast<std::size_t>(size), kPage);
  l.regions = round_up(l.small + 2 * kSmallBytes * static_cast<std::size_t>(size), kPage);
  l.total = l.regions + region_bytes * static_cast<std::size_t>(size);
  return l;
}

static_assert(sizeof(Meta) == kLine && sizeof(Wake) == kLine && sizeof(RankSlot) == kLine);
static_assert(sizeof(Abort) == kAbortLines * kLine);

std::size_t fit_region(int size, std::size_t wanted, std::size_t free_bytes) {
  // Half: leave room for the other users of /dev/shm (and other jobs on the host).
  const std::size_t budget = free_bytes / 2;
  std::size_t region = round_up(wanted, kPage);
  while (Layout::compute(size, region).total > budget && region / 2 >= kMinRegion) {
    region = round_up(region / 2, kPage);
  }
  return Layout::compute(size, region).total <= budget ? region : 0;
}

// Rank 0's background reservation of the regions: fallocate in steps, the outcome in
// Meta::reserve_state for every rank to see.
struct Segment::Reserver {
  std::atomic<bool> stop{false};
  std::thread thread;
};

Segment::Segment() = default;
Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
    layout_ = other.layout_;
    reserver_ = std::move(other.reserver_);
    regions_ready_ = std::exchange(other.regions_ready_, false);
  }
  return *this;
}

Segment::~Segment() { release(); }

void Segment::release() {
  if (reserver_) {
    reserver_->stop.store(true);
    reserver_->thread.join();
    reserver_.reset();
  }
  if (base_) munmap(base_, mapped_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

Status Segment::map(int fd, std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return Status(ErrorCode::kUnsupported,
                  "shm: mmap of " + mib(bytes) + " failed: " + errno_text(errno));
  }
  base_ = static_cast<char*>(p);
  mapped_ = bytes;
  return Status::OK();
}

Status Segment::create(int size, std::size_t region_bytes, Segment* out) {
  Segment seg;
  seg.name_ = random_name();
  const int fd = shm_open(seg.name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return Status(ErrorCode::kUnsupported,
                  "shm: shm_open(" + seg.name_ + ") failed: " + errno_text(errno));
  }
  seg.fd_ = fd;
  // From here on every failure removes the name again.
  auto fail = [&](Status s) {
    unlink(seg.name_);
    return s;
  };
  struct statvfs vfs;
  if (fstatvfs(fd, &vfs) != 0) return fail(Internal("shm: fstatvfs failed: " + errno_text(errno)));
  const std::size_t free_bytes = static_cast<std::size_t>(vfs.f_bavail) * vfs.f_frsize;
  const std::size_t wanted = region_bytes;
  region_bytes = fit_region(size, wanted, free_bytes);
  if (region_bytes == 0) {
    return fail(Status(ErrorCode::kUnsupported,
                       "shm: /dev/shm has " + mib(free_bytes) + " free, too little for " +
                           std::to_string(size) + " regions of " + mib(kMinRegion) +
                           " in half of it (a container's default /dev/shm is 64 MiB; "
                           "docker run --shm-size)"));
  }
  const Layout layout = Layout::compute(size, region_bytes);
  if (region_bytes != wanted) {
    KOLO_LOG(kWarning, "shm") << "/dev/shm has " << mib(free_bytes)
                              << " free: shm regions cut from " << mib(wanted) << " to "
                              << mib(region_bytes)
                              << " per rank (larger fused buffers are copied in chunks)";
  }
  // fallocate reserves the header's pages now: on a full tmpfs it fails with ENOSPC, where
  // ftruncate would succeed and a later first touch would raise SIGBUS. The regions'
  // pages follow in the background (wait_regions).
  bool reserve = true;
  if (fallocate(fd, 0, 0, static_cast<off_t>(layout.regions)) != 0) {
    const int e = errno;
    if (e != EOPNOTSUPP && e != ENOSYS) {
      return fail(Status(ErrorCode::kUnsupported, "shm: reserving " + mib(layout.regions) +
                                                      " in /dev/shm failed: " + errno_text(e)));
    }
    reserve = false;  // nothing to reserve with: as ftruncate alone always was
  }
  if (ftruncate(fd, static_cast<off_t>(layout.total)) != 0) {
    return fail(Status(ErrorCode::kUnsupported, "shm: ftruncate failed: " + errno_text(errno)));
  }
  Status s = seg.map(fd, layout.total);
  if (!s.ok()) return fail(s);
  seg.layout_ = layout;
  Meta& m = seg.meta();
  m.size = static_cast<std::uint32_t>(size);
  m.version = kVersion;
  m.region_bytes = region_bytes;
  m.total_bytes = layout.total;
  at(m.reserve_state).store(reserve ? 0u : 1u, std::memory_order_relaxed);
  at(m.magic).store(kMagic, std::memory_order_release);
  if (reserve) {
    seg.reserver_ = std::make_unique<Reserver>();
    Reserver* r = seg.reserver_.get();
    Meta* meta = &seg.meta();
    r->thread = std::thread([r, meta, fd, from = layout.regions, to = layout.total] {
      std::uint32_t state = 1;
      for (std::size_t off = from; off < to; off += kReserveStep) {
        if (r->stop.load()) {
          state = 3;
          break;
        }
        const std::size_t len = std::min(kReserveStep, to - off);
        if (fallocate(fd, 0, static_cast<off_t>(off), static_cast<off_t>(len)) != 0) {
          at(meta->reserve_errno).store(errno, std::memory_order_relaxed);
          state = 2;
          break;
        }
      }
      at(meta->reserve_state).store(state, std::memory_order_release);
    });
  }
  *out = std::move(seg);
  return Status::OK();
}

Status Segment::wait_regions(Deadline deadline) {
  if (regions_ready_) return Status::OK();
  Meta& m = meta();
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    const std::uint32_t state = at(m.reserve_state).load(std::memory_order_acquire);
    if (state == 1) {
      regions_ready_ = true;
      return Status::OK();
    }
    const std::size_t bytes = layout_.total - layout_.regions;
    if (state == 2) {
      return Status(ErrorCode::kUnsupported,
                    "shm: reserving " + mib(bytes) + " in /dev/shm for the regions failed: " +
                        errno_text(at(m.reserve_errno).load(std::memory_order_relaxed)) +
                        " (/dev/shm filled up after start-up; free space there or set KOLO_SHM=0)");
    }
    if (state == 3) {
      return Status(ErrorCode::kPeerFailure,
                    "shm: rank 0 closed the segment before its regions were reserved");
    }
    if (Clock::now() >= deadline) {
      return Status(ErrorCode::kPeerFailure, "shm: rank 0's reservation of " + mib(bytes) +
                                                 " in /dev/shm did not finish in time");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

Status Segment::open(const std::string& name, int size, Segment* out) {
  Segment seg;
  seg.name_ = name;
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return Status(ErrorCode::kUnsupported, "shm: shm_open(" + name +
                                               ") failed: " + errno_text(errno) +
                                               " (is every rank on the same host?)");
  }
  seg.fd_ = fd;
  struct stat st;
  if (fstat(fd, &st) != 0) return Internal("shm: fstat failed: " + errno_text(errno));
  KOLO_RETURN_IF_ERROR(seg.map(fd, static_cast<std::size_t>(st.st_size)));
  const Meta& m = seg.meta();
  if (static_cast<std::size_t>(st.st_size) < sizeof(Meta) ||
      at(const_cast<Meta&>(m).magic).load(std::memory_order_acquire) != kMagic ||
      m.version != kVersion || m.size != static_cast<std::uint32_t>(size)) {
    return Internal("shm: segment " + name + " has an unexpected header");
  }
  seg.layout_ = Layout::compute(size, m.region_bytes);
  if (seg.layout_.total != m.total_bytes || seg.layout_.total > seg.mapped_) {
    return Internal("shm: segment " + name + " has an inconsistent size");
  }
  *out = std::move(seg);
  return Status::OK();
}

void Segment::unlink(const std::string& name) {
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    KOLO_LOG(kWarning, "shm") << "shm_unlink(" << name << ") failed: " << errno_text(errno);
  }
}

Status Segment::join(int rank) {
  at(slot(rank).pid).store(static_cast<std::int32_t>(getpid()), std::memory_order_relaxed);
  struct flock lock = {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = rank;
  lock.l_len = 1;
  if (fcntl(fd_, F_OFD_SETLK, &lock) != 0) {
    return Internal("shm: rank " + std::to_string(rank) +
                    " could not take its liveness lock: " + errno_text(errno));
  }
  return Status::OK();
}

bool Segment::alive(int rank) const {
  struct flock lock = {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = rank;
  lock.l_len = 1;
  if (fcntl(fd_, F_OFD_GETLK, &lock) != 0) return true;  // cannot tell: assume alive
  return lock.l_type != F_UNLCK;
}

}  // namespace kolo::transport::shm
