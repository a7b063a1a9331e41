// NCCL's collectives for the CUDA device (device.h's Collectives over ncclComm_t).
//
// Communicators are non-blocking (ncclConfig_t::blocking = 0), so that no NCCL call can
// block the caller without a bound: a call that answers ncclInProgress is waited for by
// polling ncclCommGetAsyncError until the device's timeout, and abort() ends it.
// kolo's dtypes and ops map onto NCCL's; bool travels as uint8 with or/and as max/min.
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "device/arg_checks.h"
#include "device/cuda/cuda_device.h"
#include "transport/arg_checks.h"

namespace kolo::device::cuda {

namespace {

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUInt8:
    case DataType::kBool:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op, DataType t) {
  if (t == DataType::kBool) {  // or, and
    return op == ReduceOp::kSum || op == ReduceOp::kMax ? ncclMax : ncclMin;
  }
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

ErrorCode code_of(ncclResult_t r) {
  switch (r) {
    case ncclRemoteError:
    case ncclSystemError:
      return ErrorCode::kPeerFailure;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return ErrorCode::kInvalidArgument;
    default:
      return ErrorCode::kInternal;
  }
}

// Waits for a non-blocking communicator's work in progress: OK, its error, or false in
// *finished at the deadline (or when `stop` is set).
ncclResult_t wait_in_progress(ncclComm_t comm, Deadline deadline, const std::atomic<bool>* stop,
                              bool* finished) {
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) {
      *finished = true;
      return r;
    }
    if (state != ncclInProgress) {
      *finished = true;
      return state;
    }
    if (Clock::now() >= deadline || (stop != nullptr && stop->load())) {
      *finished = false;
      return ncclInProgress;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

class NcclCollectives : public Collectives {
 public:
  NcclCollectives(ncclComm_t comm, int device, int rank, int size, double timeout)
      : comm_(comm),
        device_(device),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        name_("NCCL on cuda:" + std::to_string(device) + " (rank " + std::to_string(rank) + " of " +
              std::to_string(size) + ")") {}

  ~NcclCollectives() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ == nullptr) return;
    cudaSetDevice(device_);
    bool finished = false;
    if (ncclCommFinalize(comm_) == ncclInProgress) {
      wait_in_progress(comm_, deadline_after(timeout_), nullptr, &finished);
    } else {
      finished = true;
    }
    if (finished) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                   Stream& stream) override {
    if (dtype == DataType::kBool && op == ReduceOp::kAverage) {
      return InvalidArgument(name_ + ": allreduce cannot average bool");
    }
    return call(
        "ncclAllReduce",
        [&](cudaStream_t s) {
          return ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op, dtype), comm_, s);
        },
        stream);
  }

  Status broadcast(const void* send, void* recv, std::size_t bytes, int root,
                   Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_root(name_, root, size_));
    return call(
        "ncclBroadcast",
        [&](cudaStream_t s) { return ncclBroadcast(send, recv, bytes, ncclUint8, root, comm_, s); },
        stream);
  }

  Status allgather(const void* send, void* recv, std::size_t bytes, Stream& stream) override {
    return call(
        "ncclAllGather",
        [&](cudaStream_t s) { return ncclAllGather(send, recv, bytes, ncclUint8, comm_, s); },
        stream);
  }

  // One broadcast per rank of its part, grouped.
  Status allgatherv(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_allgatherv_counts(name_, size_, recv_bytes));
    return call(
        "grouped ncclBroadcast",
        [&](cudaStream_t s) {
          ncclResult_t r = ncclGroupStart();
          std::size_t offset = 0;
          for (int q = 0; q < size_ && r == ncclSuccess; ++q) {
            auto* out = static_cast<char*>(recv) + offset;
            r = ncclBroadcast(q == rank_ ? send : out, out, recv_bytes[static_cast<std::size_t>(q)],
                              ncclUint8, q, comm_, s);
            offset += recv_bytes[static_cast<std::size_t>(q)];
          }
          const ncclResult_t end = ncclGroupEnd();
          return r != ncclSuccess ? r : end;
        },
        stream);
  }

  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                       ReduceOp op, Stream& stream) override {
    if (dtype == DataType::kBool && op == ReduceOp::kAverage) {
      return InvalidArgument(name_ + ": reducescatter cannot average bool");
    }
    return call(
        "ncclReduceScatter",
        [&](cudaStream_t s) {
          return ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), nccl_op(op, dtype),
                                   comm_, s);
        },
        stream);
  }

  Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                   const std::vector<std::size_t>& recv_bytes, Stream& stream) override {
    KOLO_RETURN_IF_ERROR(
        transport::check_alltoallv_counts(name_ + "'s alltoallv", size_, send_bytes, recv_bytes));
    const auto n = static_cast<std::size_t>(size_);
    return call(
        "grouped ncclSend/ncclRecv",
        [&](cudaStream_t s) {
          ncclResult_t r = ncclGroupStart();
          std::size_t so = 0, ro = 0;
          for (std::size_t q = 0; q < n && r == ncclSuccess; ++q) {
            if (send_bytes[q] > 0) {
              r = ncclSend(static_cast<const char*>(send) + so, send_bytes[q], ncclUint8,
                           static_cast<int>(q), comm_, s);
            }
            if (r == ncclSuccess && recv_bytes[q] > 0) {
              r = ncclRecv(static_cast<char*>(recv) + ro, recv_bytes[q], ncclUint8,
                           static_cast<int>(q), comm_, s);
            }
            so += send_bytes[q];
            ro += recv_bytes[q];
          }
          const ncclResult_t end = ncclGroupEnd();
          return r != ncclSuccess ? r : end;
        },
        stream);
  }

  Status async_error() override {
    std::lock_guard<std::mutex> lock(mu_);
    return async_error_locked();
  }

  void abort() override {
    aborted_ = true;  // ends a call's wait, so that it lets go of mu_
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ == nullptr) return;
    cudaSetDevice(device_);
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  Status error(const std::string& what, ncclResult_t r) const {
    std::string text = name_ + ": " + what + ": " + ncclGetErrorString(r);
    if (comm_ != nullptr) {
      const char* last = ncclGetLastError(comm_);
      if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
    }
    return Status(code_of(r), text);
  }

  Status async_error_locked() {
    if (comm_ == nullptr) return PeerFailure(name_ + " was aborted");
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) return error("ncclCommGetAsyncError", r);
    if (state != ncclSuccess && state != ncclInProgress) return error("an earlier call", state);
    return Status::OK();
  }

  template <typename F>
  Status call(const char* what, F&& enqueue, Stream& stream) {
    std::lock_guard<std::mutex> lock(mu_);
    KOLO_RETURN_IF_ERROR(async_error_locked());
    const cudaError_t ce = cudaSetDevice(device_);
    if (ce != cudaSuccess) {
      return Status(ErrorCode::kInternal, name_ + ": cudaSetDevice: " + cudaGetErrorString(ce));
    }
    ncclResult_t r = enqueue(native_stream(stream));
    if (r == ncclInProgress) {
      bool finished = false;
      r = wait_in_progress(comm_, deadline_after(timeout_), &aborted_, &finished);
      if (!finished) {
        return PeerFailure(name_ + ": " + what + " was not enqueued within " +
                           std::to_string(timeout_) + " s" +
                           (aborted_ ? " (aborted)" : ": a peer does not take part"));
      }
    }
    return r == ncclSuccess ? Status::OK() : error(what, r);
  }

  std::mutex mu_;    // one call at a time; abort() and the destructor take it too
  ncclComm_t comm_;  // null once aborted
  const int device_, rank_, size_;
  const double timeout_;
  const std::string name_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

Status nccl_unique_id(UniqueId* out) {
  static_assert(sizeof(ncclUniqueId) == sizeof(out->bytes), "NCCL's unique id is 128 bytes");
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    return Status(code_of(r), std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  }
  std::memcpy(out->bytes.data(), &id, sizeof id);
  return Status::OK();
}

Status make_nccl_collectives(int device, const UniqueId& id, int rank, int size,
                             double timeout_seconds, Deadline deadline,
                             std::unique_ptr<Collectives>* out) {
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes.data(), sizeof nid);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, nid, rank, &config);
  const std::string who = "NCCL on cuda:" + std::to_string(device) + " (rank " +
                          std::to_string(rank) + " of " + std::to_string(size) + ")";
  if (r == ncclInProgress) {
    bool finished = false;
    r = wait_in_progress(comm, deadline, nullptr, &finished);
    if (!finished) {
      ncclCommAbort(comm);
      return PeerFailure(who + ": not every rank joined the communicator in time");
    }
  }
  if (r != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    return Status(code_of(r), who + ": ncclCommInitRankConfig: " + ncclGetErrorString(r));
  }
  *out = std::make_unique<NcclCollectives>(comm, device, rank, size, timeout_seconds);
  return Status::OK();
}

}  // namespace kolo::device::cuda
