// Failure notices between ranks (see FailureNotices in communicator.h), and
// set_interrupt.
//
// A private duplicate of the world communicator carries them, so they never match data or
// control messages. Every rank keeps one MPI_Irecv from any source posted for the first
// notice; announce() sends one small message to every other rank (small enough for
// MPI's eager protocol, so it leaves without the receiver's help). received() is one
// MPI_Test, cheap enough to call from every wait loop.
//
// Not for: ordinary data or the control plane; notices are only about failures.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "transport/mpi/mpi_internal.h"

namespace kolo::transport {
namespace mpi {
namespace {

constexpr int kTagNotice = 32201;  // see mpi_control.cc and mpi_ring.cc for the others
constexpr int kNoticeBytes = 1024;

class MpiNotices final : public FailureNotices {
 public:
  ~MpiNotices() override {
    // After a notice went out or came in, the job is failing: do not touch MPI again
    // (sends to dead ranks may never complete). Otherwise retract the posted receive.
    if (comm_ == MPI_COMM_NULL || announced_ || arrived_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (recv_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&recv_);
      MPI_Wait(&recv_, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&comm_);
  }

  Status init(MPI_Comm world) {
    int rc = MPI_Comm_dup(world, &comm_);
    if (rc != MPI_SUCCESS) return Internal("mpi notices: MPI_Comm_dup: " + mpi_error_string(rc));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    rc = MPI_Irecv(in_, kNoticeBytes, MPI_BYTE, MPI_ANY_SOURCE, kTagNotice, comm_, &recv_);
    if (rc != MPI_SUCCESS) return Internal("mpi notices: MPI_Irecv: " + mpi_error_string(rc));
    return Status::OK();
  }

  void announce(const std::string& message) override {
    if (announced_ || arrived_) return;
    announced_ = true;
    const std::size_t n = std::min<std::size_t>(message.size(), kNoticeBytes);
    std::memcpy(out_, message.data(), n);
    sends_.clear();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request q;
      if (MPI_Isend(out_, static_cast<int>(n), MPI_BYTE, r, kTagNotice, comm_, &q) == MPI_SUCCESS)
        sends_.push_back(q);
    }
    // Give the messages a moment to leave (they may need this process's progress); a send
    // to a dead rank may never complete, so this is bounded, and the rest is left behind.
    const auto end = Clock::now() + std::chrono::milliseconds(100);
    int done = 0;
    while (!done && Clock::now() < end) {
      if (MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &done, MPI_STATUSES_IGNORE) !=
          MPI_SUCCESS)
        break;
      if (!done) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  bool received(std::string* message) override {
    if (!arrived_) {
      int flag = 0;
      MPI_Status status;
      if (announced_ || MPI_Test(&recv_, &flag, &status) != MPI_SUCCESS || !flag) return false;
      int bytes = 0;
      MPI_Get_count(&status, MPI_BYTE, &bytes);
      arrived_ = true;
      text_ = "rank " + std::to_string(status.MPI_SOURCE) +
              " reported: " + std::string(in_, static_cast<std::size_t>(std::max(bytes, 0)));
    }
    *message = text_;
    return true;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  MPI_Request recv_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;
  char in_[kNoticeBytes];
  char out_[kNoticeBytes];
  bool announced_ = false;
  bool arrived_ = false;
  std::string text_;
};

}  // namespace
}  // namespace mpi

Status mpi::MpiCommunicator::create_failure_notices(std::unique_ptr<FailureNotices>* out) {
  auto notices = std::make_unique<MpiNotices>();
  KOLO_RETURN_IF_ERROR(notices->init(comm_));
  *out = std::move(notices);
  return Status::OK();
}

}  // namespace kolo::transport
