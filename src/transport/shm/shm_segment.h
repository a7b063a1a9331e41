// The shared-memory segment of the shm transport: its layout, creation, mapping and the
// per-rank liveness locks.
//
// Layout (offsets from the start of the mapping; `n` ranks, regions of R bytes):
//   Meta      magic, rank count, R, total size                    (one 128-byte line)
//   Wake      futex word + sleeper count, cycle bell requests     (one line)
//   Abort     first failure report: state, reporter, text         (16 lines)
//   slots     per-rank arrival epoch, pid, cycle bell word, chunk base (n lines)
//   control   2 parities x n ranks x kControlBytes (control_and)
//   small     2 parities x n ranks x kSmallBytes (allreduces of at most kSmallBytes)
//   regions   n data regions of R bytes, each 4 KiB aligned
// Hot words sit 128 bytes apart (two cache lines: Intel's adjacent-line prefetcher
// pairs lines, so 64 bytes would still share).
//
// Liveness: every rank holds an open-file-description lock (F_OFD_SETLK) on byte `rank`
// of the segment's file for as long as its Segment lives. The kernel drops it when the
// process dies (also as a zombie, and across PID namespaces), so "lock free" means "rank
// gone"; kill(pid, 0) alone would miss both cases. (It is a second signal, for the case
// of a forked child that inherited the file and so keeps a dead parent's lock held.)
//
// Not for: synchronisation or collectives (shm_sync.h, shm_communicator.cc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/deadline.h"
#include "common/status.h"

namespace kolo::transport::shm {

inline constexpr std::size_t kLine = 128;
inline constexpr std::size_t kControlBytes = 4096;  // per rank and parity: 512 words
// Allreduces of at most this many bytes take the one-barrier path (shm_collectives.cc).
inline constexpr std::size_t kSmallBytes = 64 << 10;
// The first failure's text, as other ranks read it. A relayed failure nests the reports
// of the ranks it passed through ("rank 0 reported: ... rank 5 reported: ...") before the
// cause, and a 6-rank hierarchical job's reached ~600 bytes; longer texts keep their head
// and their end (Barrier::fail).
inline constexpr std::size_t kAbortLines = 16;
inline constexpr std::size_t kAbortText = kAbortLines * kLine - 8;
inline constexpr std::size_t kMinRegion = std::size_t{1} << 20;

struct alignas(kLine) Meta {
  std::uint64_t magic;
  std::uint32_t size;
  std::uint32_t version;
  std::uint64_t region_bytes;
  std::uint64_t total_bytes;
  // The regions' reservation (Segment::wait_regions): 0 running, 1 done, 2 failed with
  // reserve_errno, 3 abandoned (rank 0 closed the segment first).
  std::uint32_t reserve_state;
  std::int32_t reserve_errno;
};

struct alignas(kLine) Wake {
  std::uint32_t word;              // futex: bumped by every arrival
  std::uint32_t sleepers;          // ranks inside (or about to enter) FUTEX_WAIT
  std::uint64_t cycles_requested;  // the cycle bell's request counter (cycle_bell.h)
};

struct alignas(kLine) Abort {
  std::uint32_t state;  // 0 none, 1 being written, 2 ready
  std::int32_t reporter;
  char text[kAbortText];
};

struct alignas(kLine) RankSlot {
  std::uint64_t epoch;  // last barrier this rank arrived at
  std::int32_t pid;
  std::uint32_t bell;  // futex: this rank's cycle bell word (cycle_bell.h)
  // Byte offset in this rank's region where the allreduce chunk in progress lies (stored
  // before the chunk's first barrier, read by every rank after it).
  std::uint64_t chunk_base;
};

// Offsets of the parts, computed the same way by every rank.
struct Layout {
  int size = 0;
  std::size_t region_bytes = 0;
  std::size_t slots = 0, control = 0, small = 0, regions = 0, total = 0;
  static Layout compute(int size, std::size_t region_bytes);
};

// Views a field of the mapping atomically (the mapping is plain memory to C++).
template <typename T>
std::atomic_ref<T> at(T& field) {
  return std::atomic_ref<T>(field);
}

// The region size to use for `size` ranks when `free_bytes` are free in /dev/shm: `wanted`,
// halved (4 KiB multiples) until the segment takes at most half of the free space; 0 when
// even kMinRegion does not fit.
std::size_t fit_region(int size, std::size_t wanted, std::size_t free_bytes);

class Segment {
 public:
  Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();  // unmaps and closes (which drops this rank's liveness lock)

  // Rank 0: creates "/kolo-<pid>-<random>" for `size` ranks, with regions cut down by
  // fit_region (logged) when /dev/shm is short of room; fails without leaving anything
  // behind when even kMinRegion does not fit.
  // The header's pages are reserved with fallocate here; the regions' (most of the
  // segment: n x R bytes, ~40 ms of kernel time for 4 x 64 MiB) in the background, by a
  // thread of this Segment, so that start-up does not wait for them. No rank touches a
  // region before wait_regions() said the reservation succeeded, so a full tmpfs is an
  // error there and never a SIGBUS later. The name must be unlinked (unlink()) once every
  // rank has opened it.
  static Status create(int size, std::size_t region_bytes, Segment* out);
  // Other ranks: maps the segment rank 0 created and checks its header.
  static Status open(const std::string& name, int size, Segment* out);
  // Removes the name (the memory lives on while mapped). Idempotent; logs failures.
  static void unlink(const std::string& name);

  // Waits (bounded by `deadline`) until rank 0's reservation of the regions is done; every
  // rank calls it before its first use of any region. kUnsupported when it failed (naming
  // the size and the error: /dev/shm filled up since start-up), kPeerFailure at the deadline.
  // After the first success it costs one load.
  Status wait_regions(Deadline deadline);

  // Records this rank's pid and takes its liveness lock.
  Status join(int rank);
  // False when rank's liveness lock is free: its process exited (or closed its segment).
  bool alive(int rank) const;

  const std::string& name() const { return name_; }
  const Layout& layout() const { return layout_; }
  std::size_t region_bytes() const { return layout_.region_bytes; }

  Meta& meta() const { return *reinterpret_cast<Meta*>(base_); }
  Wake& wake() const { return *reinterpret_cast<Wake*>(base_ + kLine); }
  Abort& abort() const { return *reinterpret_cast<Abort*>(base_ + 2 * kLine); }
  RankSlot& slot(int rank) const {
    return *reinterpret_cast<RankSlot*>(base_ + layout_.slots + kLine * rank);
  }
  std::uint64_t* control(int parity, int rank) const {
    const std::size_t index = static_cast<std::size_t>(parity) * layout_.size + rank;
    return reinterpret_cast<std::uint64_t*>(base_ + layout_.control + index * kControlBytes);
  }
  char* region(int rank) const { return base_ + layout_.regions + layout_.region_bytes * rank; }
  char* small(int parity, int rank) const {
    const std::size_t index = static_cast<std::size_t>(parity) * layout_.size + rank;
    return base_ + layout_.small + index * kSmallBytes;
  }

 private:
  Status map(int fd, std::size_t bytes);
  void release();
  struct Reserver;

  std::unique_ptr<Reserver> reserver_;  // rank 0: the regions' reservation thread
  bool regions_ready_ = false;

  std::string name_;
  int fd_ = -1;
  char* base_ = nullptr;
  std::size_t mapped_ = 0;
  Layout layout_;
};

}  // namespace kolo::transport::shm
