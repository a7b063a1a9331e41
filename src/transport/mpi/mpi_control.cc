// The MPI transport's control plane: control_and, control_gather and control_broadcast,
// which the runtime's negotiation calls in lockstep on every rank once per cycle.
//
// Point-to-point messages through rank 0 (the root) instead of MPI collectives, because a
// collective that times out cannot say who was missing, while the root can see exactly
// which ranks' messages arrived. Protocol (all messages MPI_BYTE, tags in kTag*):
//
//   member -> root   control_and: the words;  control_gather: a head of at most kHeadBytes
//                    (length word + first bytes) and, for longer strings, a tail.
//   root -> member   one "down" message per call: [header word][payload], where the header
//                    holds a kind and a value: an and-reply (the ANDed words), a broadcast
//                    head (length + first bytes; longer strings follow as a tail), or a
//                    failure notice (a bitmask of the ranks that did not take part).
//
// When the root misses ranks by the deadline it sends a failure notice instead of the
// reply to every rank that did take part, so they fail at once naming the same ranks. A
// notice is a down message, so whatever control call a member makes next receives it: a
// failed gather (whose members expect no reply) reaches them at the following broadcast.
// Members wait a grace period past the deadline for the root's answer (the root only
// decides at its own deadline); a member that hears nothing names rank 0.
//
// Not for: the data plane (mpi_communicator.cc).
#include <algorithm>
#include <climits>
#include <cstring>

#include "common/format.h"
#include "transport/mpi/mpi_internal.h"

namespace kolo::transport::mpi {
namespace {

// A tag range of its own: nothing else in kolo sends point-to-point on this communicator,
// but distinct tags keep a misordered call from being matched as data.
constexpr int kTagAndUp = 32001;
constexpr int kTagGatherHead = 32002;
constexpr int kTagGatherTail = 32003;
constexpr int kTagDown = 32004;
constexpr int kTagBroadcastTail = 32005;

// Negotiation messages are usually a few hundred bytes: one message carries them whole.
constexpr std::size_t kHeadBytes = 512;
constexpr std::size_t kHeadWords = kHeadBytes / 8;
constexpr std::size_t kInline = kHeadBytes - 8;

enum Kind : unsigned { kAndReply = 1, kBroadcastHead = 2, kFailureNotice = 0xfe };
enum OpCode : std::uint64_t { kOpAnd = 1, kOpGather = 2, kOpBroadcast = 3 };

std::uint64_t header(unsigned kind, std::uint64_t value) {
  return (static_cast<std::uint64_t>(kind) << 56) | (value & ((std::uint64_t{1} << 56) - 1));
}
unsigned header_kind(std::uint64_t h) { return static_cast<unsigned>(h >> 56); }
std::uint64_t header_value(std::uint64_t h) { return h & ((std::uint64_t{1} << 56) - 1); }

const char* op_name(std::uint64_t code) {
  switch (code) {
    case kOpAnd:
      return "control_and";
    case kOpGather:
      return "control_gather";
    case kOpBroadcast:
      return "control_broadcast";
  }
  return "a control call";
}

// When members give up waiting for the root's verdict: a grace period past the deadline,
// long enough for the root (which decides at its own deadline, and may have entered the
// call a little later) to be heard, short next to the deadline itself. Saturates, so a
// Deadline::max() ("no deadline") stays one.
Deadline with_grace(Clock::time_point start, Deadline deadline) {
  using std::chrono::milliseconds;
  const Clock::duration grace =
      std::clamp<Clock::duration>((deadline - start) / 4, milliseconds(20), milliseconds(1000));
  return deadline > Deadline::max() - grace ? Deadline::max() : deadline + grace;
}

// Failure notices wait at most this long to leave the root.
constexpr std::chrono::milliseconds kNoticeGrace(500);

int testall(std::vector<MPI_Request>& requests, std::vector<MPI_Status>& statuses, bool* done) {
  int flag = 0;
  const int rc =
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, statuses.data());
  *done = flag != 0;
  return rc;
}

// The ranks whose request in `requests[first + r - 1]` (r = 1..size-1) has not completed.
void incomplete_ranks(std::vector<MPI_Request>& requests, std::size_t first, int size,
                      std::vector<int>* ranks) {
  for (int r = 1; r < size; ++r) {
    int flag = 0;
    MPI_Test(&requests[first + r - 1], &flag, MPI_STATUS_IGNORE);
    if (!flag && std::find(ranks->begin(), ranks->end(), r) == ranks->end()) ranks->push_back(r);
  }
  std::sort(ranks->begin(), ranks->end());
}

}  // namespace

void MpiCommunicator::observe_wait(Clock::time_point start,
                                   const std::vector<MPI_Request>* requests, std::size_t first) {
  if (!observer_) return;
  const auto now = Clock::now();
  if (now - start < std::chrono::seconds(1) || now < next_report_) return;
  next_report_ = now + std::chrono::seconds(1);
  // MPI_Request_get_status neither completes nor frees a request, so the wait's own
  // statuses are untouched.
  std::vector<int> missing;
  for (int r = 1; r < size(); ++r) {
    int flag = 1;
    if (requests) {
      MPI_Request req = (*requests)[first + r - 1];
      if (req != MPI_REQUEST_NULL) MPI_Request_get_status(req, &flag, MPI_STATUS_IGNORE);
    } else {
      flag = arrived_[r];
    }
    if (!flag) missing.push_back(r);
  }
  observer_(now - start, missing);
}

Status MpiCommunicator::root_failure(int op_code, const std::vector<int>& missing,
                                     std::string message) {
  // notice_ is only ever written here, just before the communicator breaks, so nothing in
  // flight still reads it.
  notice_.assign(1 + mask_words(), 0);
  notice_[0] = header(kFailureNotice, static_cast<std::uint64_t>(op_code));
  for (int r : missing) notice_[1 + r / 64] |= std::uint64_t{1} << (r % 64);
  std::vector<MPI_Request> sends;
  for (int r = 1; r < size(); ++r) {
    if (std::find(missing.begin(), missing.end(), r) != missing.end()) continue;
    MPI_Request request;
    if (MPI_Isend(notice_.data(), static_cast<int>(notice_.size() * 8), MPI_BYTE, r, kTagDown,
                  comm_, &request) == MPI_SUCCESS) {
      sends.push_back(request);
    }
  }
  std::vector<MPI_Status> statuses(sends.size());
  int error = MPI_SUCCESS;
  // Best effort: the ranks that miss the notice still time out naming rank 0.
  (void)poll_until(
      Clock::now() + kNoticeGrace, [&](bool* done) { return testall(sends, statuses, done); },
      &error);
  return fail(std::move(message));
}

Status MpiCommunicator::receive_down(const char* op, std::size_t capacity, unsigned kind,
                                     Clock::time_point start, Deadline deadline,
                                     std::uint64_t* value, std::size_t* bytes) {
  down_.resize((capacity + 7) / 8);
  int rc = MPI_Irecv(down_.data(), static_cast<int>(capacity), MPI_BYTE, 0, kTagDown, comm_,
                     &requests_[0]);
  if (rc != MPI_SUCCESS) return fail_mpi(where(op), rc);
  statuses_.resize(requests_.size());
  int error = MPI_SUCCESS;
  const WaitResult result = poll_until(
      with_grace(start, deadline), [&](bool* done) { return testall(requests_, statuses_, done); },
      &error);
  if (result == WaitResult::kMpiError) return fail_mpi(where(op), error);
  if (result == WaitResult::kTimeout) {
    return fail(where(op) + ": rank 0 (the control-plane root) did not answer within " +
                seconds_string(Clock::now() - start) + " (dead or hung?)");
  }
  int received = 0;
  MPI_Get_count(&statuses_[0], MPI_BYTE, &received);
  const std::uint64_t h = received >= 8 ? down_[0] : 0;
  if (header_kind(h) == kFailureNotice &&
      static_cast<std::size_t>(received) >= 8 * (1 + mask_words())) {
    missing_.clear();
    for (int r = 0; r < size(); ++r) {
      if (down_[1 + r / 64] >> (r % 64) & 1) missing_.push_back(r);
    }
    return fail(where(op) + ": " + ranks_string(missing_) + " did not take part in negotiation (" +
                op_name(header_value(h)) + ") by the deadline (dead or hung?); reported by rank 0");
  }
  if (header_kind(h) != kind) {
    return fail(where(op) + ": unexpected control message from rank 0 (kind " +
                std::to_string(header_kind(h)) + ", " + std::to_string(received) +
                " bytes): ranks are not making the same control calls in the same order");
  }
  *value = header_value(h);
  *bytes = static_cast<std::size_t>(received);
  return Status::OK();
}

Status MpiCommunicator::control_and(std::vector<std::uint64_t>& words, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("control_and"));
  if (size() == 1) return Status::OK();
  if (words.size() > static_cast<std::size_t>(INT_MAX / 8 - 1)) {
    return InvalidArgument(where("control_and") + ": " + std::to_string(words.size()) +
                           " words is more than an MPI message can carry");
  }
  const auto start = Clock::now();
  if (rank() == 0) return control_and_root(words, start, deadline);
  return control_and_member(words, start, deadline);
}

Status MpiCommunicator::control_and_member(std::vector<std::uint64_t>& words,
                                           Clock::time_point start, Deadline deadline) {
  const std::size_t n = words.size();
  requests_.resize(2);
  const int rc = MPI_Isend(words.data(), static_cast<int>(n * 8), MPI_BYTE, 0, kTagAndUp, comm_,
                           &requests_[1]);
  if (rc != MPI_SUCCESS) return fail_mpi(where("control_and"), rc);
  std::uint64_t count = 0;
  std::size_t bytes = 0;
  KOLO_RETURN_IF_ERROR(receive_down("control_and", 8 * (1 + std::max(n, mask_words())), kAndReply,
                                    start, deadline, &count, &bytes));
  if (count != n || bytes != 8 * (1 + n)) {
    return fail(where("control_and") + ": rank 0 replied with " + std::to_string(count) +
                " words, this rank sent " + std::to_string(n) + " (ranks disagree on the size)");
  }
  if (n > 0) std::memcpy(words.data(), down_.data() + 1, n * 8);
  return Status::OK();
}

Status MpiCommunicator::control_and_root(std::vector<std::uint64_t>& words, Clock::time_point start,
                                         Deadline deadline) {
  const std::size_t n = words.size();
  const int members = size() - 1;
  up_.resize(static_cast<std::size_t>(members) * n + 1);  // +1: data() is never null
  requests_.resize(members);
  statuses_.resize(members);
  for (int r = 1; r < size(); ++r) {
    const int rc = MPI_Irecv(up_.data() + (r - 1) * n, static_cast<int>(n * 8), MPI_BYTE, r,
                             kTagAndUp, comm_, &requests_[r - 1]);
    if (rc != MPI_SUCCESS) return fail_mpi(where("control_and"), rc);
  }
  int error = MPI_SUCCESS;
  WaitResult result = poll_until(
      deadline,
      [&](bool* done) {
        const int rc = testall(requests_, statuses_, done);
        if (rc == MPI_SUCCESS && !*done) observe_wait(start, &requests_, 0);
        return rc;
      },
      &error);
  if (result == WaitResult::kMpiError) return fail_mpi(where("control_and"), error);
  if (result == WaitResult::kTimeout) {
    missing_.clear();
    incomplete_ranks(requests_, 0, size(), &missing_);
    return root_failure(kOpAnd, missing_,
                        where("control_and") + ": " + ranks_string(missing_) +
                            " did not take part in negotiation within " +
                            seconds_string(deadline - start) + " (dead or hung?)");
  }
  missing_.clear();
  for (int r = 1; r < size(); ++r) {
    int received = 0;
    MPI_Get_count(&statuses_[r - 1], MPI_BYTE, &received);
    if (static_cast<std::size_t>(received) != n * 8) missing_.push_back(r);
  }
  if (!missing_.empty()) {
    return root_failure(kOpAnd, missing_,
                        where("control_and") + ": " + ranks_string(missing_) +
                            " sent a different " + "number of words than rank 0's " +
                            std::to_string(n) + " (ranks are out of step)");
  }
  for (int r = 1; r < size(); ++r) {
    const std::uint64_t* theirs = up_.data() + (r - 1) * n;
    for (std::size_t k = 0; k < n; ++k) words[k] &= theirs[k];
  }
  down_.resize(1 + n);
  down_[0] = header(kAndReply, n);
  if (n > 0) std::memcpy(down_.data() + 1, words.data(), n * 8);
  for (int r = 1; r < size(); ++r) {
    const int rc = MPI_Isend(down_.data(), static_cast<int>(8 * (1 + n)), MPI_BYTE, r, kTagDown,
                             comm_, &requests_[r - 1]);
    if (rc != MPI_SUCCESS) return fail_mpi(where("control_and"), rc);
  }
  result = poll_until(
      with_grace(start, deadline), [&](bool* done) { return testall(requests_, statuses_, done); },
      &error);
  if (result == WaitResult::kMpiError) return fail_mpi(where("control_and"), error);
  if (result == WaitResult::kTimeout) {
    missing_.clear();
    incomplete_ranks(requests_, 0, size(), &missing_);
    return root_failure(kOpAnd, missing_,
                        where("control_and") + ": " + ranks_string(missing_) +
                            " did not receive the result within " +
                            seconds_string(Clock::now() - start) + " (dead or hung?)");
  }
  return Status::OK();
}

Status MpiCommunicator::control_gather(const std::string& mine, std::vector<std::string>* all,
                                       Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("control_gather"));
  if (rank() == 0 && all == nullptr) {
    return InvalidArgument(where("control_gather") + ": rank 0 needs a vector for the result");
  }
  if (mine.size() > static_cast<std::size_t>(INT_MAX)) {
    return InvalidArgument(where("control_gather") + ": a " + std::to_string(mine.size()) +
                           "-byte message is more than an MPI message can carry");
  }
  const auto start = Clock::now();
  const std::size_t length = mine.size();
  const std::size_t head = std::min(length, kInline);

  if (rank() != 0) {
    if (all != nullptr) all->clear();
    head_.resize(kHeadWords);
    head_[0] = length;
    std::memcpy(head_.data() + 1, mine.data(), head);
    requests_.assign(2, MPI_REQUEST_NULL);
    statuses_.resize(2);
    int rc = MPI_Isend(head_.data(), static_cast<int>(8 + head), MPI_BYTE, 0, kTagGatherHead, comm_,
                       &requests_[0]);
    if (rc == MPI_SUCCESS && length > head) {
      rc = MPI_Isend(mine.data() + head, static_cast<int>(length - head), MPI_BYTE, 0,
                     kTagGatherTail, comm_, &requests_[1]);
    }
    if (rc != MPI_SUCCESS) return fail_mpi(where("control_gather"), rc);
    int error = MPI_SUCCESS;
    const WaitResult result = poll_until(
        with_grace(start, deadline),
        [&](bool* done) { return testall(requests_, statuses_, done); }, &error);
    if (result == WaitResult::kMpiError) return fail_mpi(where("control_gather"), error);
    if (result == WaitResult::kTimeout) {
      return fail(where("control_gather") + ": rank 0 (the control-plane root) did not " +
                  "receive this rank's " + std::to_string(length) + "-byte message within " +
                  seconds_string(Clock::now() - start) + " (dead or hung?)");
    }
    return Status::OK();
  }

  all->resize(size());
  (*all)[0] = mine;
  if (size() == 1) return Status::OK();
  // Requests [0, members) are the heads from ranks 1..size-1; [members, 2 * members) their
  // tails, posted once a head says how long the rest is.
  const int members = size() - 1;
  up_.resize(static_cast<std::size_t>(members) * kHeadWords);
  requests_.assign(2 * members, MPI_REQUEST_NULL);
  statuses_.resize(2 * members);
  indices_.resize(2 * members);
  arrived_.assign(size(), 0);
  arrived_[0] = 1;
  for (int r = 1; r < size(); ++r) {
    const int rc = MPI_Irecv(up_.data() + (r - 1) * kHeadWords, static_cast<int>(kHeadBytes),
                             MPI_BYTE, r, kTagGatherHead, comm_, &requests_[r - 1]);
    if (rc != MPI_SUCCESS) return fail_mpi(where("control_gather"), rc);
  }
  int pending = members;
  std::string protocol_error;
  auto progress = [&](bool* done) {
    int completed = 0;
    int rc =
        MPI_Testsome(2 * members, requests_.data(), &completed, indices_.data(), statuses_.data());
    if (rc != MPI_SUCCESS) return rc;
    for (int i = 0; i < completed && completed != MPI_UNDEFINED; ++i) {
      const int index = indices_[i];
      const int r = index % members + 1;
      if (index >= members) {  // a tail
        arrived_[r] = 1;
        --pending;
        continue;
      }
      int received = 0;
      MPI_Get_count(&statuses_[i], MPI_BYTE, &received);
      const std::uint64_t* h = up_.data() + (r - 1) * kHeadWords;
      const std::size_t theirs = received >= 8 ? h[0] : 0;
      const std::size_t inline_bytes = std::min<std::size_t>(theirs, kInline);
      if (received < 8 || static_cast<std::size_t>(received) != 8 + inline_bytes ||
          theirs > static_cast<std::size_t>(INT_MAX)) {
        protocol_error = "rank " + std::to_string(r) + " sent a malformed control_gather head (" +
                         std::to_string(received) + " bytes)";
        *done = true;
        return MPI_SUCCESS;
      }
      std::string& out = (*all)[r];
      out.assign(reinterpret_cast<const char*>(h + 1), inline_bytes);
      if (theirs == inline_bytes) {
        arrived_[r] = 1;
        --pending;
        continue;
      }
      out.resize(theirs);
      rc = MPI_Irecv(out.data() + inline_bytes, static_cast<int>(theirs - inline_bytes), MPI_BYTE,
                     r, kTagGatherTail, comm_, &requests_[members + r - 1]);
      if (rc != MPI_SUCCESS) return rc;
    }
    *done = pending == 0;
    return MPI_SUCCESS;
  };
  int error = MPI_SUCCESS;
  const WaitResult result = poll_until(
      deadline,
      [&](bool* done) {
        const int rc = progress(done);
        if (rc == MPI_SUCCESS && !*done) observe_wait(start, nullptr, 0);
        return rc;
      },
      &error);
  if (result == WaitResult::kMpiError) return fail_mpi(where("control_gather"), error);
  missing_.clear();
  for (int r = 1; r < size(); ++r) {
    if (!arrived_[r]) missing_.push_back(r);
  }
  if (!protocol_error.empty()) {
    return root_failure(kOpGather, missing_, where("control_gather") + ": " + protocol_error);
  }
  if (result == WaitResult::kTimeout) {
    return root_failure(kOpGather, missing_,
                        where("control_gather") + ": " + ranks_string(missing_) +
                            " did not take part in negotiation within " +
                            seconds_string(deadline - start) + " (dead or hung?)");
  }
  return Status::OK();
}

Status MpiCommunicator::control_broadcast(std::string* message, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(check_usable("control_broadcast"));
  if (size() == 1) return Status::OK();
  const auto start = Clock::now();
  if (rank() != 0) {
    requests_.assign(1, MPI_REQUEST_NULL);
    std::uint64_t length = 0;
    std::size_t bytes = 0;
    KOLO_RETURN_IF_ERROR(receive_down("control_broadcast",
                                      std::max(kHeadBytes, 8 * (1 + mask_words())), kBroadcastHead,
                                      start, deadline, &length, &bytes));
    const std::size_t head = std::min<std::size_t>(length, kInline);
    if (bytes != 8 + head || length > static_cast<std::uint64_t>(INT_MAX)) {
      return fail(where("control_broadcast") + ": malformed message from rank 0 (" +
                  std::to_string(bytes) + " bytes)");
    }
    message->assign(reinterpret_cast<const char*>(down_.data() + 1), head);
    if (length == head) return Status::OK();
    message->resize(length);
    requests_.assign(1, MPI_REQUEST_NULL);
    statuses_.resize(1);
    const int rc = MPI_Irecv(message->data() + head, static_cast<int>(length - head), MPI_BYTE, 0,
                             kTagBroadcastTail, comm_, &requests_[0]);
    if (rc != MPI_SUCCESS) return fail_mpi(where("control_broadcast"), rc);
    int error = MPI_SUCCESS;
    const WaitResult result = poll_until(
        with_grace(start, deadline),
        [&](bool* done) { return testall(requests_, statuses_, done); }, &error);
    if (result == WaitResult::kMpiError) return fail_mpi(where("control_broadcast"), error);
    if (result == WaitResult::kTimeout) {
      return fail(where("control_broadcast") + ": rank 0 (the control-plane root) did not send " +
                  "the rest of a " + std::to_string(length) + "-byte message within " +
                  seconds_string(Clock::now() - start) + " (dead or hung?)");
    }
    return Status::OK();
  }

  if (message->size() > static_cast<std::size_t>(INT_MAX)) {
    return InvalidArgument(where("control_broadcast") + ": a " + std::to_string(message->size()) +
                           "-byte message is more than an MPI message can carry");
  }
  const std::size_t length = message->size();
  const std::size_t head = std::min(length, kInline);
  head_.resize(kHeadWords);
  head_[0] = header(kBroadcastHead, length);
  std::memcpy(head_.data() + 1, message->data(), head);
  // Requests [0, members) carry the heads to ranks 1..size-1, [members, 2 * members) tails.
  const int members = size() - 1;
  requests_.assign(2 * members, MPI_REQUEST_NULL);
  statuses_.resize(2 * members);
  for (int r = 1; r < size(); ++r) {
    int rc = MPI_Isend(head_.data(), static_cast<int>(8 + head), MPI_BYTE, r, kTagDown, comm_,
                       &requests_[r - 1]);
    if (rc == MPI_SUCCESS && length > head) {
      rc = MPI_Isend(message->data() + head, static_cast<int>(length - head), MPI_BYTE, r,
                     kTagBroadcastTail, comm_, &requests_[members + r - 1]);
    }
    if (rc != MPI_SUCCESS) return fail_mpi(where("control_broadcast"), rc);
  }
  int error = MPI_SUCCESS;
  const WaitResult result = poll_until(
      deadline, [&](bool* done) { return testall(requests_, statuses_, done); }, &error);
  if (result == WaitResult::kMpiError) return fail_mpi(where("control_broadcast"), error);
  if (result == WaitResult::kTimeout) {
    missing_.clear();
    incomplete_ranks(requests_, 0, size(), &missing_);
    incomplete_ranks(requests_, members, size(), &missing_);
    return root_failure(kOpBroadcast, missing_,
                        where("control_broadcast") + ": " + ranks_string(missing_) +
                            " did not receive the message within " +
                            seconds_string(deadline - start) + " (dead or hung?)");
  }
  return Status::OK();
}

}  // namespace kolo::transport::mpi
