// Hierarchical device collectives (hier_collectives.h).
#include "device/hier/hier_collectives.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>

#include "common/reduce.h"
#include "common/thread_annotations.h"
#include "device/arg_checks.h"
#include "transport/arg_checks.h"

namespace kolo::device::hier {

namespace {

// Where each rank of the communicator sits: its host and its place there.
struct Layout {
  std::vector<std::vector<int>> members;  // per host, its ranks ascending
  std::vector<int> host;                  // per rank: its index in members
  std::vector<int> local_rank;            // per rank
  int local_size = 0;                     // the same on every host
};

class HierCollectives : public Collectives {
 public:
  HierCollectives(Device& dev, int rank, int size, Layout layout, double timeout)
      : dev_(dev),
        rank_(rank),
        size_(size),
        layout_(std::move(layout)),
        timeout_(timeout),
        name_(dev.name() + "'s hierarchical collectives (rank " + std::to_string(rank) + " of " +
              std::to_string(size) + ", " + std::to_string(layout_.members.size()) + " hosts of " +
              std::to_string(layout_.local_size) + ")") {}

  ~HierCollectives() override {
    if (Status e = async_error(); !e.ok()) announce(e);
    // The stream's last work may still read the staging buffers (bounded wait).
    if (event_ && used_) (void)dev_.synchronize(*event_, deadline_after(std::min(timeout_, 10.0)));
  }

  Status connect(transport::Communicator& control, const ConnectOptions& options,
                 Deadline deadline) {
    KOLO_RETURN_IF_ERROR(dev_.create_event(&event_));
    // Every rank takes part in every subset, in the same order (hosts, then local ranks).
    const int me_local = layout_.local_rank[static_cast<std::size_t>(rank_)];
    for (const auto& host : layout_.members) {
      std::unique_ptr<transport::Communicator> sub;
      KOLO_RETURN_IF_ERROR(control.subset(host, &sub));
      if (sub) local_cpu_ = std::move(sub);
    }
    for (int l = 0; l < layout_.local_size; ++l) {
      std::vector<int> ranks;
      for (const auto& host : layout_.members) ranks.push_back(host[static_cast<std::size_t>(l)]);
      std::sort(ranks.begin(), ranks.end());
      std::unique_ptr<transport::Communicator> sub;
      KOLO_RETURN_IF_ERROR(control.subset(ranks, &sub));
      if (l == me_local) {
        cross_ = std::move(sub);
        cross_ranks_ = ranks;
      }
    }
    std::vector<int> everyone(static_cast<std::size_t>(size_));
    std::iota(everyone.begin(), everyone.end(), 0);
    KOLO_RETURN_IF_ERROR(control.subset(everyone, &flat_));
    if (!local_cpu_ || !cross_ || !flat_) return Internal(name_ + ": a subset came back empty");
    // A failure one rank finds (a host-mate's death in the device collectives) reaches the
    // ranks waiting for it across hosts at once, where the transport has notices.
    const Status made = flat_->create_failure_notices(&notices_);
    if (made.ok()) {
      const transport::Interrupt interrupt = [this](std::string* why) {
        return notices_->received(why);
      };
      (void)cross_->set_interrupt(interrupt);
      (void)flat_->set_interrupt(interrupt);
    } else if (made.code() != ErrorCode::kUnsupported) {
      return made;
    }
    if (layout_.local_size > 1) {
      ConnectOptions inside = options;
      inside.hierarchical = false;  // one host: NCCL's way or the IPC path
      inside.rank_names.clear();    // messages name the host's ranks as `control` does
      for (int r : layout_.members[static_cast<std::size_t>(host_of(rank_))]) {
        inside.rank_names.push_back(static_cast<std::size_t>(r) < options.rank_names.size()
                                        ? options.rank_names[static_cast<std::size_t>(r)]
                                        : r);
      }
      KOLO_RETURN_IF_ERROR(connect_collectives(dev_, *local_cpu_, deadline, &local_, inside));
    }
    return Status::OK();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                   Stream& stream) override {
    KOLO_RETURN_IF_ERROR(begin(stream));
    const std::size_t es = dtype_size(dtype);
    const ReduceOp fold = wire_op(op);
    auto* out = static_cast<char*>(recv);
    const auto L = static_cast<std::size_t>(layout_.local_size);
    const auto l = static_cast<std::size_t>(local_rank());
    // 1: the host's sum on its device (or this rank's input alone).
    if (local_) {
      KOLO_RETURN_IF_ERROR(failed(local_->allreduce(send, recv, count, dtype, fold, stream)));
    } else if (send != recv) {
      KOLO_RETURN_IF_ERROR(failed(dev_.copy(recv, send, count * es, stream)));
    }
    // 2: this local rank's slice across hosts (the same slice on each host: one rank of
    // each host per cross group).
    const std::size_t lo = count * l / L, n = count * (l + 1) / L - lo;
    if (n > 0) {
      KOLO_RETURN_IF_ERROR(stage_out(out + lo * es, n * es, stream));
      KOLO_RETURN_IF_ERROR(
          failed(cross_->allreduce(in_.data(), n, dtype, fold, deadline_after(timeout_))));
      KOLO_RETURN_IF_ERROR(failed(dev_.copy(out + lo * es, in_.data(), n * es, stream)));
    }
    // 3: the slices gathered on each host's device.
    if (local_) {
      std::vector<std::size_t> parts;
      for (std::size_t q = 0; q < L; ++q)
        parts.push_back((count * (q + 1) / L - count * q / L) * es);
      KOLO_RETURN_IF_ERROR(failed(local_->allgatherv(out + lo * es, out, parts, stream)));
    }
    if (op == ReduceOp::kAverage && count > 0) {
      KOLO_RETURN_IF_ERROR(
          failed(dev_.convert(recv, dtype, recv, dtype, count, 1.0, size_, stream)));
    }
    return end(stream);
  }

  Status broadcast(const void* send, void* recv, std::size_t bytes, int root,
                   Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_root(name_, root, size_));
    KOLO_RETURN_IF_ERROR(begin(stream));
    const int root_host = host_of(root);
    const int root_local = layout_.local_rank[static_cast<std::size_t>(root)];
    const bool on_root_host = host_of(rank_) == root_host;
    // 1: the root's host.
    if (on_root_host) {
      if (local_) {
        KOLO_RETURN_IF_ERROR(failed(local_->broadcast(send, recv, bytes, root_local, stream)));
      } else if (send != recv) {
        KOLO_RETURN_IF_ERROR(failed(dev_.copy(recv, send, bytes, stream)));
      }
    }
    // 2: across hosts, among the root's local rank on each host.
    if (local_rank() == root_local && bytes > 0) {
      const int cross_root = static_cast<int>(
          std::find(cross_ranks_.begin(), cross_ranks_.end(), root) - cross_ranks_.begin());
      // Off the root's host nothing is copied out, but the wait orders the CPU transport's
      // writes into in_ after the stream's last reads of it.
      KOLO_RETURN_IF_ERROR(stage_out(recv, on_root_host ? bytes : 0, stream));
      KOLO_RETURN_IF_ERROR(reserve(&in_, bytes));
      KOLO_RETURN_IF_ERROR(
          failed(cross_->broadcast(in_.data(), bytes, cross_root, deadline_after(timeout_))));
      if (!on_root_host) KOLO_RETURN_IF_ERROR(failed(dev_.copy(recv, in_.data(), bytes, stream)));
    }
    // 3: the other hosts, from their rank of the root's local rank.
    if (!on_root_host && local_) {
      KOLO_RETURN_IF_ERROR(failed(local_->broadcast(recv, recv, bytes, root_local, stream)));
    }
    return end(stream);
  }

  // The rest through host memory over every rank's CPU transport.
  Status allgatherv(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_allgatherv_counts(name_, size_, recv_bytes));
    KOLO_RETURN_IF_ERROR(begin(stream));
    const std::size_t total = std::accumulate(recv_bytes.begin(), recv_bytes.end(), std::size_t{0});
    KOLO_RETURN_IF_ERROR(stage_out(send, recv_bytes[static_cast<std::size_t>(rank_)], stream));
    KOLO_RETURN_IF_ERROR(reserve(&out_, total));
    KOLO_RETURN_IF_ERROR(
        failed(flat_->allgatherv(in_.data(), out_.data(), recv_bytes, deadline_after(timeout_))));
    KOLO_RETURN_IF_ERROR(failed(dev_.copy(recv, out_.data(), total, stream)));
    return end(stream);
  }

  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                       ReduceOp op, Stream& stream) override {
    KOLO_RETURN_IF_ERROR(begin(stream));
    const std::size_t es = dtype_size(dtype);
    const ReduceOp fold = wire_op(op);
    KOLO_RETURN_IF_ERROR(
        stage_out(send, recv_count * es * static_cast<std::size_t>(size_), stream));
    KOLO_RETURN_IF_ERROR(reserve(&out_, recv_count * es));
    const std::vector<std::size_t> counts(static_cast<std::size_t>(size_), recv_count);
    KOLO_RETURN_IF_ERROR(failed(flat_->reducescatter(in_.data(), out_.data(), counts, dtype, fold,
                                                     deadline_after(timeout_))));
    KOLO_RETURN_IF_ERROR(failed(dev_.copy(recv, out_.data(), recv_count * es, stream)));
    if (op == ReduceOp::kAverage && recv_count > 0) {
      KOLO_RETURN_IF_ERROR(
          failed(dev_.convert(recv, dtype, recv, dtype, recv_count, 1.0, size_, stream)));
    }
    return end(stream);
  }

  Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                   const std::vector<std::size_t>& recv_bytes, Stream& stream) override {
    KOLO_RETURN_IF_ERROR(
        transport::check_alltoallv_counts(name_ + "'s alltoallv", size_, send_bytes, recv_bytes));
    KOLO_RETURN_IF_ERROR(begin(stream));
    const std::size_t out_total =
        std::accumulate(recv_bytes.begin(), recv_bytes.end(), std::size_t{0});
    KOLO_RETURN_IF_ERROR(stage_out(
        send, std::accumulate(send_bytes.begin(), send_bytes.end(), std::size_t{0}), stream));
    KOLO_RETURN_IF_ERROR(reserve(&out_, out_total));
    KOLO_RETURN_IF_ERROR(failed(flat_->alltoallv(in_.data(), send_bytes, out_.data(), recv_bytes,
                                                 deadline_after(timeout_))));
    KOLO_RETURN_IF_ERROR(failed(dev_.copy(recv, out_.data(), out_total, stream)));
    return end(stream);
  }

  Status async_error() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_.ok()) return error_;
    }
    return local_ ? local_->async_error() : Status::OK();
  }

  void abort() override { (void)failed(PeerFailure("aborted"), false); }

 private:
  int host_of(int rank) const { return layout_.host[static_cast<std::size_t>(rank)]; }
  int local_rank() const { return layout_.local_rank[static_cast<std::size_t>(rank_)]; }

  // Fails at once after an error; orders this call after the previous one when it came on
  // another stream (the staging buffers are reused in stream order).
  Status begin(Stream& stream) {
    if (Status e = async_error(); !e.ok()) {
      announce(e);
      return e;
    }
    if (used_ && last_stream_ != &stream)
      KOLO_RETURN_IF_ERROR(failed(dev_.wait_event(stream, *event_)));
    last_stream_ = &stream;
    used_ = true;
    return Status::OK();
  }
  Status end(Stream& stream) { return failed(dev_.record(*event_, stream)); }

  // A host buffer of at least `bytes` bytes. Growing it first waits for the stream's work
  // of the previous calls, which may still read the old one.
  Status reserve(std::vector<unsigned char>* buf, std::size_t bytes) {
    if (buf->size() >= bytes) return Status::OK();
    KOLO_RETURN_IF_ERROR(failed(dev_.synchronize(*event_, deadline_after(timeout_))));
    buf->resize(bytes);
    return Status::OK();
  }

  // `bytes` bytes of device memory into in_, and the host waits for them (the one host
  // wait: the CPU transport sends host memory).
  Status stage_out(const void* src, std::size_t bytes, Stream& stream) {
    KOLO_RETURN_IF_ERROR(reserve(&in_, std::max<std::size_t>(bytes, 1)));
    if (bytes > 0) KOLO_RETURN_IF_ERROR(failed(dev_.copy(in_.data(), src, bytes, stream)));
    KOLO_RETURN_IF_ERROR(failed(dev_.record(*event_, stream)));
    return failed(dev_.synchronize(*event_, deadline_after(timeout_)));
  }

  // A failure breaks the communicator: later calls fail at once with it (NCCL's rule),
  // and the host's device collectives are aborted, so that host-mates waiting in them
  // for this rank fail at once too. Called on the owner's thread (also by abort(), safe
  // from any thread, with announce = false: begin() announces it later).
  Status failed(Status s, bool announce_now = true) {
    if (s.ok()) return s;
    bool first = false;
    Status out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = error_.ok();
      if (first) error_ = Status(s.code(), name_ + ": " + s.message());
      out = error_;
    }
    if (first && local_) local_->abort_with(out);
    if (announce_now) announce(out);
    return out;
  }
  // Tells the other hosts' ranks, once (owner's thread only).
  void announce(const Status& e) {
    if (notices_ && !announced_) notices_->announce(e.message());
    announced_ = true;
  }

  Device& dev_;
  const int rank_;
  const int size_;
  const Layout layout_;
  const double timeout_;
  const std::string name_;

  std::unique_ptr<transport::Communicator> local_cpu_;  // this host's ranks
  std::unique_ptr<transport::Communicator> cross_;      // this local rank on every host
  std::vector<int> cross_ranks_;                        // cross_'s ranks in control's numbers
  std::unique_ptr<transport::Communicator> flat_;       // every rank
  std::unique_ptr<transport::FailureNotices> notices_;  // over flat_ (null: it has none)
  bool announced_ = false;
  std::unique_ptr<Collectives> local_;   // the device's, inside this host (null: alone there)
  std::unique_ptr<Event> event_;         // after each call's work
  std::vector<unsigned char> in_, out_;  // host staging
  const Stream* last_stream_ = nullptr;
  bool used_ = false;

  std::mutex mu_;
  Status error_ KOLO_GUARDED_BY(mu_);
};

}  // namespace

Status make_hier_collectives(Device& device, transport::Communicator& control,
                             const std::vector<int>& host_of, const ConnectOptions& options,
                             double timeout_seconds, Deadline deadline,
                             std::unique_ptr<Collectives>* out) {
  Layout layout;
  layout.host = host_of;
  layout.local_rank.assign(host_of.size(), 0);
  for (std::size_t r = 0; r < host_of.size(); ++r) {
    const auto h = static_cast<std::size_t>(host_of[r]);
    if (layout.members.size() <= h) layout.members.resize(h + 1);
    layout.local_rank[r] = static_cast<int>(layout.members[h].size());
    layout.members[h].push_back(static_cast<int>(r));
  }
  layout.local_size = static_cast<int>(layout.members.front().size());
  for (std::size_t h = 1; h < layout.members.size(); ++h) {
    if (layout.members[h].size() == layout.members.front().size()) continue;
    return InvalidArgument(
        device.name() +
        ": hierarchical device collectives need as many ranks on every host, "
        "but the host of rank 0 has " +
        std::to_string(layout.members.front().size()) + " and the host of rank " +
        std::to_string(layout.members[h].front()) + " has " +
        std::to_string(layout.members[h].size()) +
        " (give every host the same number of ranks, or a GPU of its own to every rank)");
  }
  auto c = std::make_unique<HierCollectives>(device, control.rank(), control.size(),
                                             std::move(layout), timeout_seconds);
  KOLO_RETURN_IF_ERROR(c->connect(control, options, deadline));
  *out = std::move(c);
  return Status::OK();
}

}  // namespace kolo::device::hier
