// The host stand-in's collectives (device.h's Collectives): NCCL's calls done by a CPU
// transport on the stream's thread, with NCCL's semantics where the transport's differ
// (out-of-place buffers, ncclAvg, an asynchronous error that breaks the communicator,
// abort).
//
// Each call checks its arguments at once, then enqueues the work. The work runs the
// transport call with the device's timeout as its deadline, so a peer that never takes
// part fails it naming that rank (the transport's message), as NCCL's watchdog would.
// An in-flight call that abort() cannot interrupt (the in-process transport has no
// interrupt) ends at that deadline; every call after abort() fails at once.
#include <cstring>
#include <mutex>
#include <numeric>
#include <utility>

#include "common/reduce.h"
#include "common/thread_annotations.h"
#include "device/arg_checks.h"
#include "device/host/host_stream.h"
#include "transport/arg_checks.h"

namespace kolo::device::host {

namespace {

// What the communicator's work shares with the queued tasks (they may outlive the
// Collectives object when its owner drops it before synchronizing its streams).
struct State {
  std::string name;                               // "host stand-in 0's collectives (rank 1 of 2)"
  std::unique_ptr<transport::Communicator> comm;  // the streams' threads, one call at a time
  double timeout_seconds = 60;
  std::mutex mu;
  Status error;        // GUARDED_BY(mu): the first failure, or the abort
  std::mutex call_mu;  // one transport call at a time when several streams use it
};

class HostCollectives : public Collectives {
 public:
  explicit HostCollectives(std::shared_ptr<State> state) : s_(std::move(state)) {}

  int rank() const override { return s_->comm->rank(); }
  int size() const override { return s_->comm->size(); }

  Status allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                   Stream& stream) override {
    return enqueue(stream, [=](transport::Communicator& c, Deadline d) {
      if (send != recv && count > 0) std::memmove(recv, send, count * dtype_size(dtype));
      const ReduceOp wire = wire_op(op);
      KOLO_RETURN_IF_ERROR(c.allreduce(recv, count, dtype, wire, d));
      if (op == ReduceOp::kAverage) scale(recv, count, dtype, 1.0, c.size());
      return Status::OK();
    });
  }

  Status broadcast(const void* send, void* recv, std::size_t bytes, int root,
                   Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_root(s_->name, root, size()));
    return enqueue(stream, [=](transport::Communicator& c, Deadline d) {
      if (c.rank() == root && send != recv && bytes > 0) std::memmove(recv, send, bytes);
      return c.broadcast(recv, bytes, root, d);
    });
  }

  Status allgatherv(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_allgatherv_counts(s_->name, size(), recv_bytes));
    return enqueue(stream, [=](transport::Communicator& c, Deadline d) {
      return c.allgatherv(send, recv, recv_bytes, d);
    });
  }

  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                       ReduceOp op, Stream& stream) override {
    return enqueue(stream, [=](transport::Communicator& c, Deadline d) {
      const ReduceOp wire = wire_op(op);
      const std::vector<std::size_t> counts(static_cast<std::size_t>(c.size()), recv_count);
      KOLO_RETURN_IF_ERROR(c.reducescatter(send, recv, counts, dtype, wire, d));
      if (op == ReduceOp::kAverage) scale(recv, recv_count, dtype, 1.0, c.size());
      return Status::OK();
    });
  }

  Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                   const std::vector<std::size_t>& recv_bytes, Stream& stream) override {
    KOLO_RETURN_IF_ERROR(transport::check_alltoallv_counts(s_->name + "'s alltoallv", size(),
                                                           send_bytes, recv_bytes));
    return enqueue(stream, [=](transport::Communicator& c, Deadline d) {
      return c.alltoallv(send, send_bytes, recv, recv_bytes, d);
    });
  }

  Status async_error() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    return s_->error;
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->error.ok()) {
      s_->error = PeerFailure(s_->name + " was aborted");
    }
  }

 private:
  using Work = std::function<Status(transport::Communicator&, Deadline)>;

  // After an error every call fails at once with it, as NCCL's after an async error.
  Status enqueue(Stream& stream, Work work) {
    KOLO_RETURN_IF_ERROR(async_error());
    static_cast<HostStream&>(stream).enqueue_work([s = s_, work = std::move(work)]() -> Status {
      {
        std::lock_guard<std::mutex> lock(s->mu);
        if (!s->error.ok()) return s->error;
      }
      Status result;
      {
        std::lock_guard<std::mutex> one_call(s->call_mu);
        result = work(*s->comm, deadline_after(s->timeout_seconds));
      }
      if (!result.ok()) {
        std::lock_guard<std::mutex> lock(s->mu);
        if (s->error.ok()) s->error = Status(result.code(), s->name + ": " + result.message());
        return s->error;
      }
      return Status::OK();
    });
    return Status::OK();
  }

  std::shared_ptr<State> s_;
};

}  // namespace

Status make_host_collectives(const std::string& device,
                             std::unique_ptr<transport::Communicator> comm, double timeout_seconds,
                             std::unique_ptr<Collectives>* out) {
  auto state = std::make_shared<State>();
  state->name = device + "'s collectives (rank " + std::to_string(comm->rank()) + " of " +
                std::to_string(comm->size()) + ")";
  state->comm = std::move(comm);
  state->timeout_seconds = timeout_seconds;
  *out = std::make_unique<HostCollectives>(std::move(state));
  return Status::OK();
}

}  // namespace kolo::device::host
