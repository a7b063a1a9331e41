// The CUDA-IPC path's collectives (ipc_collectives.h).
#include "device/ipc/ipc_collectives.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/reduce.h"
#include "common/thread_annotations.h"
#include "device/arg_checks.h"
#include "transport/arg_checks.h"
#include "transport/shm/shm_sync.h"

namespace kolo::device::ipc {

namespace {

using transport::shm::at;
using transport::shm::Barrier;
using transport::shm::Segment;

// The bound of the closing barrier and of the wait for the last work before the region
// is freed.
constexpr double kCloseSeconds = 10;

// What a rank publishes in the segment's control area at connect time: its region's
// handle, then its event's.
constexpr std::size_t kHandleBytes = sizeof(IpcHandle::bytes);
static_assert(2 * kHandleBytes <= transport::shm::kControlBytes);

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

class IpcCollectives : public Collectives {
 public:
  IpcCollectives(Device& dev, Segment seg, int rank, int size, const IpcOptions& o)
      : dev_(dev),
        seg_(std::move(seg)),
        barrier_(&seg_, rank, size),
        rank_(rank),
        size_(size),
        half_((o.half_bytes + 7) / 8 * 8),
        timeout_(o.timeout_seconds),
        name_(dev.name() + "'s CUDA-IPC collectives (rank " +
              std::to_string(static_cast<std::size_t>(rank) < o.rank_names.size()
                                 ? o.rank_names[static_cast<std::size_t>(rank)]
                                 : rank) +
              ", " + std::to_string(size) + " on this GPU)") {
    if (!o.rank_names.empty()) barrier_.set_rank_names(o.rank_names);
    barrier_.set_label("cuda-ipc");
    barrier_.set_interrupt([this](std::string* why) {
      if (!aborted_.load()) return false;
      *why = name_ + " was aborted";
      return true;
    });
  }

  ~IpcCollectives() override {
    // After a failure the streams' last work may still wait on a peer and use the
    // regions: nothing is unmapped or freed (the process's exit does it).
    const Status error = async_error();
    if (!error.ok()) publish(error);
    bool clean = error.ok() && !barrier_.broken();
    if (clean && event_ && last_stream_ != nullptr) {
      // The last call's work reads and writes the regions: wait for it (bounded).
      clean = dev_.synchronize(*event_, deadline_after(std::min(timeout_, kCloseSeconds))).ok();
    }
    if (!clean) {
      if (mine_ != nullptr) {
        KOLO_LOG(kWarning, "device") << name_
                                     << ": keeping its shared regions mapped after a failure "
                                        "(device work may still use them); the process's exit "
                                        "frees them";
      }
      return;
    }
    for (int q = 0; q < size_; ++q) {
      if (q != rank_ && regions_[q] != nullptr) dev_.close_shared(regions_[q]);
    }
    // Peers may still read this rank's region until their own work is done: free it once
    // every rank has passed the closing barrier; otherwise it stays until the process ends.
    if (close_sync().ok()) {
      dev_.release(mine_);
    } else {
      KOLO_LOG(kWarning, "device") << name_
                                   << ": not freeing its shared region (a peer did not close "
                                      "its collectives in time); the process's exit frees it";
    }
  }

  Status connect(Deadline deadline) {
    const Status s = connect_regions(deadline);
    // The peers learn at once (their connect or close fails quoting it).
    if (!s.ok() && !barrier_.broken()) (void)barrier_.abort(name_ + ": " + s.message());
    return s;
  }

  // Allocates and exports this rank's region and event, publishes their handles, and opens
  // the peers'.
  Status connect_regions(Deadline deadline) {
    IpcHandle region_handle, event_handle;
    regions_.assign(static_cast<std::size_t>(size_), nullptr);
    peer_events_.resize(static_cast<std::size_t>(size_));
    KOLO_RETURN_IF_ERROR(dev_.allocate_shared(2 * half_, &mine_, &region_handle));
    KOLO_RETURN_IF_ERROR(dev_.create_shared_event(&event_, &event_handle));
    const int parity = next_parity();
    auto* area = reinterpret_cast<unsigned char*>(seg_.control(parity, rank_));
    std::memcpy(area, region_handle.bytes.data(), kHandleBytes);
    std::memcpy(area + kHandleBytes, event_handle.bytes.data(), kHandleBytes);
    KOLO_RETURN_IF_ERROR(sync("connect", deadline));
    regions_[rank_] = mine_;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      IpcHandle region, event;
      const auto* theirs = reinterpret_cast<const unsigned char*>(seg_.control(parity, q));
      std::memcpy(region.bytes.data(), theirs, kHandleBytes);
      std::memcpy(event.bytes.data(), theirs + kHandleBytes, kHandleBytes);
      KOLO_RETURN_IF_ERROR(dev_.open_shared(region, &regions_[q]));
      KOLO_RETURN_IF_ERROR(dev_.open_shared_event(event, &peer_events_[q]));
    }
    // Every rank opened every handle: nothing needs the names any more.
    KOLO_RETURN_IF_ERROR(sync("connect", deadline));
    dev_.unpublish(region_handle);
    dev_.unpublish(event_handle);
    return Status::OK();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                   Stream& stream) override {
    KOLO_RETURN_IF_ERROR(begin(stream));
    const std::size_t es = dtype_size(dtype);
    const std::size_t per_chunk = half_ / es;
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    for (std::size_t start = 0; start < count; start += per_chunk) {
      const std::size_t c = std::min(per_chunk, count - start);
      const int h = next_half();
      // 1: this rank's input into its region.
      KOLO_RETURN_IF_ERROR(dev_.copy(region(rank_, h), in + start * es, c * es, stream));
      KOLO_RETURN_IF_ERROR(phase("allreduce", stream));
      // 2: this rank's slice, folded over the regions in rank order into its output, then
      // back into its region's slice for the others (no rank reads it there before the
      // next barrier; each reads only its own slice of this region meanwhile).
      const std::size_t lo = slice_begin(c, rank_), n = slice_begin(c, rank_ + 1) - lo;
      char* mine = out + (start + lo) * es;
      if (n > 0) {
        KOLO_RETURN_IF_ERROR(fold_regions(mine, h, lo * es, n, dtype, op, stream));
        KOLO_RETURN_IF_ERROR(dev_.copy(region(rank_, h) + lo * es, mine, n * es, stream));
      }
      KOLO_RETURN_IF_ERROR(phase("allreduce", stream));
      // 3: the other ranks' slices out.
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        const std::size_t qlo = slice_begin(c, q), qn = slice_begin(c, q + 1) - qlo;
        KOLO_RETURN_IF_ERROR(
            dev_.copy(out + (start + qlo) * es, region(q, h) + qlo * es, qn * es, stream));
      }
    }
    return end(stream);
  }

  Status broadcast(const void* send, void* recv, std::size_t bytes, int root,
                   Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_root(name_, root, size_));
    KOLO_RETURN_IF_ERROR(begin(stream));
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    for (std::size_t off = 0; off < bytes; off += half_) {
      const std::size_t c = std::min(half_, bytes - off);
      const int h = next_half();
      if (rank_ == root) KOLO_RETURN_IF_ERROR(dev_.copy(region(root, h), in + off, c, stream));
      KOLO_RETURN_IF_ERROR(phase("broadcast", stream));
      if (rank_ != root || send != recv) {
        KOLO_RETURN_IF_ERROR(dev_.copy(out + off, region(root, h), c, stream));
      }
    }
    return end(stream);
  }

  Status allgatherv(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_allgatherv_counts(name_, size_, recv_bytes));
    KOLO_RETURN_IF_ERROR(begin(stream));
    std::size_t rounds = 0;
    for (std::size_t b : recv_bytes) rounds = std::max(rounds, ceil_div(b, half_));
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    for (std::size_t k = 0; k < rounds; ++k) {
      const std::size_t off = k * half_;
      const int h = next_half();
      const std::size_t mine = piece(recv_bytes[rank_], off, half_);
      KOLO_RETURN_IF_ERROR(dev_.copy(region(rank_, h), in + off, mine, stream));
      KOLO_RETURN_IF_ERROR(phase("allgather", stream));
      std::size_t at_q = 0;
      for (int q = 0; q < size_; ++q) {
        const std::size_t c = piece(recv_bytes[q], off, half_);
        KOLO_RETURN_IF_ERROR(dev_.copy(out + at_q + off, region(q, h), c, stream));
        at_q += recv_bytes[q];
      }
    }
    return end(stream);
  }

  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                       ReduceOp op, Stream& stream) override {
    KOLO_RETURN_IF_ERROR(begin(stream));
    const std::size_t es = dtype_size(dtype);
    const std::size_t n = static_cast<std::size_t>(size_);
    const std::size_t per_chunk = half_ / (n * es);  // elements of each block per round
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    for (std::size_t start = 0; start < recv_count; start += per_chunk) {
      const std::size_t c = std::min(per_chunk, recv_count - start);
      const int h = next_half();
      // Block b's chunk at b * c elements of this rank's region.
      for (std::size_t b = 0; b < n; ++b) {
        KOLO_RETURN_IF_ERROR(dev_.copy(region(rank_, h) + b * c * es,
                                       in + (b * recv_count + start) * es, c * es, stream));
      }
      KOLO_RETURN_IF_ERROR(phase("reducescatter", stream));
      char* mine = out + start * es;
      const std::size_t at_me = static_cast<std::size_t>(rank_) * c * es;
      KOLO_RETURN_IF_ERROR(fold_regions(mine, h, at_me, c, dtype, op, stream));
    }
    return end(stream);
  }

  Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                   const std::vector<std::size_t>& recv_bytes, Stream& stream) override {
    KOLO_RETURN_IF_ERROR(
        transport::check_alltoallv_counts(name_ + "'s alltoallv", size_, send_bytes, recv_bytes));
    KOLO_RETURN_IF_ERROR(begin(stream));
    const std::size_t n = static_cast<std::size_t>(size_);
    const std::size_t per = half_ / n;  // bytes of each block per round, at per * d
    std::size_t my_rounds = 0;
    for (std::size_t b : send_bytes) my_rounds = std::max(my_rounds, ceil_div(b, per));
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    // The number of rounds is the largest block's anywhere: the first round's barrier
    // carries each rank's, so a job whose blocks are all empty passes one barrier.
    std::size_t rounds = 1;
    for (std::size_t k = 0; k < rounds; ++k) {
      const std::size_t off = k * per;
      const int h = next_half();
      std::size_t at_d = 0;
      for (std::size_t d = 0; d < n; ++d) {
        KOLO_RETURN_IF_ERROR(dev_.copy(region(rank_, h) + d * per, in + at_d + off,
                                       piece(send_bytes[d], off, per), stream));
        at_d += send_bytes[d];
      }
      std::vector<std::uint64_t> words;
      KOLO_RETURN_IF_ERROR(phase("alltoallv", stream, my_rounds, k == 0 ? &words : nullptr));
      if (k == 0) {
        rounds = static_cast<std::size_t>(*std::max_element(words.begin(), words.end()));
      }
      std::size_t at_q = 0;
      for (int q = 0; q < size_; ++q) {
        const std::size_t c = piece(recv_bytes[q], off, per);
        KOLO_RETURN_IF_ERROR(dev_.copy(
            out + at_q + off, region(q, h) + static_cast<std::size_t>(rank_) * per, c, stream));
        at_q += recv_bytes[q];
      }
    }
    return end(stream);
  }

  Status async_error() override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  void abort() override { abort_as(PeerFailure(name_ + " was aborted")); }
  void abort_with(const Status& cause) override {
    abort_as(PeerFailure(name_ + " was aborted: " + cause.message()));
  }

 private:
  void abort_as(Status error) {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.store(true);
    if (error_.ok()) error_ = std::move(error);
    // The peers' barriers fail at once quoting it (this rank's own, at its next call).
    transport::shm::publish_abort(seg_, rank_, error_.message());
  }

  // The start of rank q's slice of `count` elements (the shm transport's split).
  std::size_t slice_begin(std::size_t count, int q) const {
    return count * static_cast<std::size_t>(q) / static_cast<std::size_t>(size_);
  }
  // The bytes of a block of `total` bytes in the round that starts at `off`.
  static std::size_t piece(std::size_t total, std::size_t off, std::size_t per) {
    return total > off ? std::min(per, total - off) : 0;
  }
  char* region(int q, int h) const { return static_cast<char*>(regions_[q]) + h * half_; }
  // dst = op over every rank's `count` elements at `offset` bytes into its region's half
  // h, folded in rank order (so every rank computes the same bits), divided by the rank
  // count for kAverage.
  Status fold_regions(char* dst, int h, std::size_t offset, std::size_t count, DataType dtype,
                      ReduceOp op, Stream& stream) {
    KOLO_RETURN_IF_ERROR(dev_.copy(dst, region(0, h) + offset, count * dtype_size(dtype), stream));
    for (int q = 1; q < size_; ++q) {
      KOLO_RETURN_IF_ERROR(
          dev_.reduce(dst, region(q, h) + offset, count, dtype, wire_op(op), stream));
    }
    if (op == ReduceOp::kAverage) {
      KOLO_RETURN_IF_ERROR(dev_.convert(dst, dtype, dst, dtype, count, 1.0, size_, stream));
    }
    return Status::OK();
  }
  int next_half() { return static_cast<int>(uses_++ % 2); }
  // The control area's parity for the next barrier (a rank writes it before the barrier
  // and the others read it after; the next write to it is two barriers later).
  int next_parity() const { return static_cast<int>((barrier_.epoch() + 1) % 2); }

  // Fails at once after an error; orders this call after the previous one when it came
  // on another stream (so that the event's last record covers every call's work).
  Status begin(Stream& stream) {
    if (Status e = async_error(); !e.ok()) {
      publish(e);
      return e;
    }
    if (last_stream_ != nullptr && last_stream_ != &stream) {
      KOLO_RETURN_IF_ERROR(dev_.wait_event(stream, *event_));
    }
    last_stream_ = &stream;
    return Status::OK();
  }
  Status end(Stream& stream) { return failed(dev_.record(*event_, stream)); }

  // This rank's writes so far are done once its event is; every rank passes the barrier;
  // this stream waits for every peer's writes. `word` travels with the barrier: every
  // rank's is in *words (when not null).
  Status phase(const char* op, Stream& stream, std::uint64_t word = 0,
               std::vector<std::uint64_t>* words = nullptr) {
    KOLO_RETURN_IF_ERROR(failed(dev_.record(*event_, stream)));
    const int parity = next_parity();
    at(seg_.control(parity, rank_)[0]).store(word);
    at(seg_.control(parity, rank_)[1]).store(kCollective);
    KOLO_RETURN_IF_ERROR(sync(op, deadline_after(timeout_)));
    KOLO_RETURN_IF_ERROR(failed(check_peers_kind(parity, kCollective, op)));
    if (words != nullptr) {
      words->clear();
      for (int q = 0; q < size_; ++q) words->push_back(at(seg_.control(parity, q)[0]).load());
    }
    for (int q = 0; q < size_; ++q) {
      if (q != rank_) KOLO_RETURN_IF_ERROR(failed(dev_.wait_event(stream, *peer_events_[q])));
    }
    return Status::OK();
  }

  Status sync(const char* op, Deadline deadline) { return failed(barrier_.sync(op, deadline)); }

  // What a barrier is for, beside each rank's word: a rank that closes its collectives
  // while the others run one must not pass for a participant (the barrier counts
  // arrivals only).
  static constexpr std::uint64_t kCollective = 1, kClose = 2;
  Status check_peers_kind(int parity, std::uint64_t mine, const char* op) {
    for (int q = 0; q < size_; ++q) {
      const std::uint64_t theirs = at(seg_.control(parity, q)[1]).load();
      if (theirs == mine) continue;
      const Status s = PeerFailure(
          "rank " + std::to_string(q) +
          (theirs == kClose ? " closed its collectives while this rank ran " + std::string(op)
                            : " ran a collective while this rank closed its collectives"));
      publish(s);
      return s;
    }
    return Status::OK();
  }
  Status close_sync() {
    const int parity = next_parity();
    at(seg_.control(parity, rank_)[1]).store(kClose);
    KOLO_RETURN_IF_ERROR(barrier_.sync("close", deadline_after(std::min(timeout_, kCloseSeconds))));
    return check_peers_kind(parity, kClose, "close");
  }

  // An error found here (abort() on another thread) reaches the peers' barriers at once.
  void publish(const Status& e) {
    if (!barrier_.broken()) (void)barrier_.abort(e.message());
  }

  // A failure breaks the communicator: later calls fail at once with it (NCCL's rule).
  Status failed(Status s) {
    if (s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = Status(s.code(), name_ + ": " + s.message());
    return error_;
  }

  Device& dev_;
  Segment seg_;
  Barrier barrier_;
  const int rank_;
  const int size_;
  const std::size_t half_;
  const double timeout_;
  const std::string name_;

  void* mine_ = nullptr;          // this rank's region (two halves)
  std::vector<void*> regions_;    // every rank's, opened here (this rank's: mine_)
  std::unique_ptr<Event> event_;  // this rank's shared event
  std::vector<std::unique_ptr<Event>> peer_events_;  // the peers', opened here
  std::uint64_t uses_ = 0;                           // halves used so far
  const Stream* last_stream_ = nullptr;              // the previous call's (identity only)

  std::atomic<bool> aborted_{false};
  std::mutex mu_;
  Status error_ KOLO_GUARDED_BY(mu_);
};

}  // namespace

Status make_ipc_collectives(Device& device, Segment segment, int rank, int size,
                            const IpcOptions& options, Deadline deadline,
                            std::unique_ptr<Collectives>* out) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgument(device.name() + ": CUDA-IPC collectives of rank " +
                           std::to_string(rank) + " of " + std::to_string(size));
  }
  if ((options.half_bytes + 7) / 8 * 8 < 8 * static_cast<std::size_t>(size)) {
    return InvalidArgument(device.name() + ": CUDA-IPC regions of " +
                           std::to_string(options.half_bytes) +
                           " bytes per half, less than 8 per "
                           "rank for " +
                           std::to_string(size) + " ranks");
  }
  auto c = std::make_unique<IpcCollectives>(device, std::move(segment), rank, size, options);
  KOLO_RETURN_IF_ERROR(c->connect(deadline));
  *out = std::move(c);
  return Status::OK();
}

}  // namespace kolo::device::ipc
