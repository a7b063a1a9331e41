#include "core/controller.h"

#include <algorithm>
#include <bit>
#include <chrono>

#include "common/deadline.h"
#include "common/format.h"
#include "common/logging.h"

namespace kolo::core {

namespace {
bool test_bit(const std::vector<std::uint64_t>& w, std::size_t offset, int bit) {
  return (w[offset + bit / 64] >> (bit % 64)) & 1u;
}
void set_bit(std::vector<std::uint64_t>& w, std::size_t offset, int bit) {
  w[offset + bit / 64] |= std::uint64_t{1} << (bit % 64);
}
std::string set_prefix(int set_id, const std::vector<int>& members) {
  if (members.empty()) return "";
  std::vector<int> own(members.size());
  for (std::size_t i = 0; i < own.size(); ++i) own[i] = static_cast<int>(i);
  std::string as = ranks_string(own);
  as = as.substr(as.find(' ') + 1);  // "ranks 0, 1" -> "0, 1"
  return "process set " + std::to_string(set_id) + " (" + ranks_string(members) +
         " of the job as its " + (members.size() == 1 ? "rank " : "ranks ") + as + "): ";
}

}  // namespace

Controller::Controller(const Config& config, transport::Communicator* comm, int set_id,
                       std::vector<int> members)
    : config_(config),
      comm_(comm),
      set_id_(set_id),
      members_(std::move(members)),
      set_prefix_(set_prefix(set_id_, members_)),
      words_((config.cache_capacity + 63) / 64),
      rank_words_((comm->size() + 63) / 64),
      cache_(config.cache_capacity),
      table_(comm->size()) {
  // A stopped rank blocks every cycle in its first control call, so the table-based
  // stall check below never runs: the coordinator also warns from inside that wait.
  if (comm_->rank() == 0 && config_.stall_check_seconds > 0) {
    comm_->set_wait_observer(
        [this](transport::Clock::duration waited, const std::vector<int>& missing) {
          warn_waiting(waited, missing);
        });
  }
}

Controller::~Controller() {
  if (comm_->rank() == 0 && config_.stall_check_seconds > 0) comm_->set_wait_observer({});
}

std::vector<int> Controller::job_ranks(const std::vector<int>& set_ranks) const {
  if (members_.empty()) return set_ranks;
  std::vector<int> out;
  for (int r : set_ranks) {
    out.push_back(r >= 0 && r < static_cast<int>(members_.size()) ? members_[r] : r);
  }
  return out;
}

std::string Controller::pending_names() const {
  std::vector<std::string> names;
  for (const auto& r : uncached_) names.push_back(r.name);
  for (const auto& [bit, hit] : hits_) names.push_back(hit.request.name);
  for (const auto& [name, r] : sent_) names.push_back(name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 5) out += " and " + std::to_string(names.size() - 5) + " more";
  return out.empty() ? "none yet" : out;
}

void Controller::warn_waiting(transport::Clock::duration waited, const std::vector<int>& missing) {
  const double seconds = std::chrono::duration<double>(waited).count();
  const auto now = Clock::now();
  const auto period = seconds_duration(config_.stall_check_seconds);
  // The wait ends at the peer timeout (both default to 60 s): warn by half of it at the
  // latest, so that the warning comes before the failure.
  if (seconds < std::min(config_.stall_check_seconds, config_.peer_timeout_seconds / 2)) return;
  if (last_wait_warning_ != Clock::time_point{} && now - last_wait_warning_ < period) return;
  last_wait_warning_ = now;
  const std::string who = missing.empty() ? "some rank (this transport cannot tell which)"
                                          : ranks_string(job_ranks(missing));
  KOLO_LOG(kWarning, "stall") << set_prefix_ << "rank " << (members_.empty() ? 0 : members_[0])
                              << " has waited " << static_cast<int>(seconds)
                              << " s in negotiation for " << who
                              << ", which take no part at all: stopped (SIGSTOP, a debugger), "
                                 "hung outside kolo, or on another machine that is unreachable. "
                                 "Tensors of rank "
                              << (members_.empty() ? 0 : members_[0])
                              << " waiting: " << pending_names()
                              << ". They are reported dead after " << config_.peer_timeout_seconds
                              << " s (KOLO_PEER_TIMEOUT_SECONDS).";
}

transport::Deadline Controller::deadline() const {
  return deadline_after(config_.peer_timeout_seconds);
}

void Controller::renegotiate_hit(int bit) {
  auto it = hits_.find(bit);
  if (it == hits_.end()) return;
  uncached_.push_back(std::move(it->second.request));
  hits_.erase(it);
}

void Controller::sort_new(std::vector<Request> requests, Clock::time_point now,
                          std::vector<std::uint64_t>* invalid) {
  for (auto& r : requests) {
    if (r.op == OpType::kJoin) joined_ = true;
    int bit = -1;
    const auto lookup = cache_.capacity() > 0 && ResponseCache::cacheable_op(r.op)
                            ? cache_.lookup(r, &bit)
                            : ResponseCache::Lookup::kMiss;
    if (lookup == ResponseCache::Lookup::kHit && !hits_.count(bit)) {
      hits_[bit] = Hit{std::move(r), now};
      continue;
    }
    if (lookup == ResponseCache::Lookup::kInvalid) set_bit(*invalid, 0, bit);
    uncached_.push_back(std::move(r));
  }
  // A hit that waits long may be a stall: renegotiate it so the coordinator can see
  // (and report, or shut down on) which ranks are missing: after half the shorter of the
  // stall check and stall shutdown periods that are on.
  double patience = 0;
  for (double period : {config_.stall_check_seconds, config_.stall_shutdown_seconds}) {
    if (period > 0) patience = patience > 0 ? std::min(patience, period / 2) : period / 2;
  }
  if (patience > 0) {
    for (const auto& [bit, hit] : hits_) {
      if (std::chrono::duration<double>(now - hit.since).count() > patience) {
        set_bit(*invalid, 0, bit);
      }
    }
  }
}

Controller::Cycle Controller::run(std::vector<Request> new_requests, Leave leave,
                                  bool busy_elsewhere) {
  const bool want_shutdown = leave != Leave::kNo;
  Cycle cycle;
  const auto now = Clock::now();
  std::vector<std::uint64_t>& invalid = invalid_;  // reused: a cycle allocates little
  invalid.assign(words_, 0);
  sort_new(std::move(new_requests), now, &invalid);
  if (comm_->rank() == 0) check_stalls(now);

  std::uint64_t flags = 0;
  if (!uncached_.empty()) flags |= kUncached;
  if (want_shutdown) flags |= kShutdown;
  if (joined_) flags |= kJoined;
  if (!abort_message_.empty() || has_proposal_) flags |= kCoordinator;
  if (busy_elsewhere) flags |= kBusyElsewhere;
  // [~flags | hit bits | ~invalid bits | ~ranks calling shutdown() | ~ranks exiting]:
  // inverted parts come out of the AND as the OR over ranks.
  const std::size_t leave_at = 1 + 2 * static_cast<std::size_t>(words_);
  std::vector<std::uint64_t>& words = words_scratch_;
  words.assign(leave_at + 2 * rank_words_, 0);
  words[0] = ~flags;
  for (const auto& [bit, hit] : hits_) set_bit(words, 1, bit);
  for (int i = 0; i < words_; ++i) words[1 + words_ + i] = ~invalid[i];
  for (int i = 0; i < 2 * rank_words_; ++i) words[leave_at + i] = ~std::uint64_t{0};
  if (want_shutdown) {
    const std::size_t part = leave == Leave::kExit ? leave_at + rank_words_ : leave_at;
    words[part + comm_->rank() / 64] &= ~(std::uint64_t{1} << (comm_->rank() % 64));
  }

  cycle.fatal = comm_->control_and(words, deadline());
  if (!cycle.fatal.ok()) return cycle;
  const std::uint64_t any = ~words[0];
  cycle.idle = any == 0 && hits_.empty();
  for (int i = 0; i < words_ && cycle.idle; ++i)
    cycle.idle = words[1 + i] == 0 && ~words[1 + words_ + i] == 0;
  if (any & kShutdown) {
    cycle.shutdown = true;
    for (int r = 0; r < comm_->size(); ++r) {
      if (!test_bit(words, leave_at, r)) cycle.shutdown_ranks.push_back(r);
      if (!test_bit(words, leave_at + rank_words_, r)) cycle.exited_ranks.push_back(r);
    }
    return cycle;
  }

  // The set bits of each word, in bit order (a cycle walks words, not all the bits).
  bool any_invalid = false;
  for (int i = 0; i < words_; ++i) {
    for (std::uint64_t m = ~words[1 + words_ + i]; m != 0; m &= m - 1) {
      const int bit = i * 64 + std::countr_zero(m);
      any_invalid = true;
      cache_.erase(bit);
      renegotiate_hit(bit);
    }
  }
  const bool any_joined = any & kJoined;
  if (any_joined) {
    // Joined ranks set no bits, so cached operations go through the coordinator.
    while (!hits_.empty()) renegotiate_hit(hits_.begin()->first);
  } else {
    for (int i = 0; i < words_; ++i) {
      for (std::uint64_t m = words[1 + i]; m != 0; m &= m - 1) {
        const int bit = i * 64 + std::countr_zero(m);
        if (!cache_.contains(bit)) continue;
        cycle.responses.push_back(cache_.response(bit));
        cache_.touch(bit);
        hits_.erase(bit);
      }
    }
  }

  if ((any & (kUncached | kCoordinator)) || any_invalid || any_joined) {
    ++slow_cycles_;
    ResponseList list;
    cycle.fatal = slow_path(now, &list);
    if (!cycle.fatal.ok()) return cycle;
    if (list.abort_code != ErrorCode::kOk) {
      cycle.fatal = Status(list.abort_code, list.abort_message);
      return cycle;
    }
    cycle.has_tunables = list.has_tunables;
    cycle.tunables = list.tunables;
    for (auto& resp : list.responses) {
      KOLO_LOG(kTrace, "negotiate") << "response " << op_name(resp.op) << " '" << resp.name << "'"
                                    << (resp.is_error() ? " error: " + resp.error : std::string());
      if (resp.op == OpType::kJoin) joined_ = false;
      auto mine = sent_.find(resp.name);
      if (mine != sent_.end()) {
        if (ResponseCache::cacheable(resp) && cache_.capacity() > 0) {
          const int evicted = cache_.put(resp, mine->second);
          if (evicted >= 0) renegotiate_hit(evicted);
        }
        sent_.erase(mine);
      }
      cycle.responses.push_back(std::move(resp));
    }
  } else if (!cycle.responses.empty()) {
    ++fast_cycles_;
  }
  return cycle;
}

Status Controller::slow_path(Clock::time_point now, ResponseList* list) {
  for (const auto& r : uncached_) sent_[r.name] = r;
  for (const auto& r : uncached_) {
    KOLO_LOG(kTrace, "negotiate") << "request " << op_name(r.op) << " '" << r.name << "'";
  }
  const std::string mine = encode_requests(uncached_);
  uncached_.clear();
  std::vector<std::string> all;
  KOLO_RETURN_IF_ERROR(comm_->control_gather(mine, &all, deadline()));
  std::string encoded;
  if (comm_->rank() == 0) {
    // A malformed list, or one that speaks for another rank, stops the job on every
    // rank at once with the coordinator's message (instead of rank 0 alone, leaving the
    // others to time out in the broadcast below).
    Status bad;
    for (std::size_t sender = 0; sender < all.size() && bad.ok(); ++sender) {
      std::vector<Request> reqs;
      bad = decode_requests(all[sender], &reqs);
      if (bad.code() == ErrorCode::kMismatch) {  // another kolo build
        bad = Status(bad.code(),
                     "negotiation: rank " + std::to_string(sender) + " sent " + bad.message());
      } else if (!bad.ok()) {
        bad = Status(bad.code(), "negotiation: the request list from rank " +
                                     std::to_string(sender) + " is malformed: " + bad.message());
      } else {
        bad = table_.add_from(static_cast<int>(sender), reqs, now);
      }
    }
    if (!bad.ok()) {
      KOLO_LOG(kError, "negotiate") << bad.message();
      list->abort_code = bad.code();
      list->abort_message = bad.message();
    } else {
      list->responses = table_.take_ready();
      if (!set_prefix_.empty()) {
        for (auto& r : list->responses) {
          if (r.is_error()) r.error = set_prefix_ + r.error;
        }
      }
    }
    if (!abort_message_.empty() && bad.ok()) {
      list->abort_code = ErrorCode::kStalled;
      list->abort_message = abort_message_;
    }
    if (has_proposal_) {
      list->has_tunables = true;
      list->tunables = proposal_;
      has_proposal_ = false;
    }
    encoded = encode_response_list(*list);
  }
  KOLO_RETURN_IF_ERROR(comm_->control_broadcast(&encoded, deadline()));
  if (comm_->rank() != 0) {
    const Status decoded = decode_response_list(encoded, list);
    if (!decoded.ok()) {
      return Status(decoded.code(), "negotiation: rank " + std::to_string(comm_->rank()) +
                                        " got from the coordinator (rank 0) " + decoded.message());
    }
  }
  return Status::OK();
}

void Controller::propose(const Tunables& tunables) {
  has_proposal_ = true;
  proposal_ = tunables;
}

std::string Controller::stall_advice() const {
  std::string what_next = config_.stall_shutdown_seconds > 0
                              ? "kolo stops the job after " +
                                    number_string(config_.stall_shutdown_seconds) +
                                    " s of stall (KOLO_STALL_SHUTDOWN_SECONDS; 0 = wait forever)."
                              : "KOLO_STALL_SHUTDOWN_SECONDS=0: kolo waits for them forever.";
  return "Those ranks may be stuck, running other code (different tensor names or another "
         "number of steps), or out of data: a rank with no more batches should call "
         "kolo::join(), so the others finish without it. " +
         what_next;
}

void Controller::check_stalls(Clock::time_point now) {
  const bool warn = config_.stall_check_seconds > 0;
  if ((!warn && config_.stall_shutdown_seconds <= 0) || now < next_stall_check_ || table_.empty())
    return;
  // Look once a second; warn about each stalled name once per KOLO_STALL_CHECK_SECONDS
  // (when that is on; the shutdown below works without it).
  next_stall_check_ = now + std::chrono::seconds(1);
  const auto period = seconds_duration(config_.stall_check_seconds);
  std::unordered_map<std::string, Clock::time_point> still_warned;
  const auto stalls =
      warn ? table_.stalls(now, config_.stall_check_seconds) : std::vector<MessageTable::Stall>();
  for (const auto& s : stalls) {
    auto it = warned_.find(s.name);
    if (it != warned_.end() && now - it->second < period) {
      still_warned.insert(*it);
      continue;
    }
    still_warned[s.name] = now;
    KOLO_LOG(kWarning, "stall") << set_prefix_ << "tensor '" << s.name << "' was submitted by "
                                << ranks_string(job_ranks(s.submitted)) << " but not by "
                                << ranks_string(job_ranks(s.missing)) << " for "
                                << static_cast<int>(s.seconds) << " s. " << stall_advice();
  }
  warned_ = std::move(still_warned);
  if (config_.stall_shutdown_seconds > 0 && abort_message_.empty()) {
    const auto stalled = table_.stalls(now, config_.stall_shutdown_seconds);
    if (!stalled.empty()) {
      const auto& s = stalled.front();
      abort_message_ = set_prefix_ + "stall shutdown after " +
                       std::to_string(static_cast<int>(s.seconds)) +
                       " s (KOLO_STALL_SHUTDOWN_SECONDS): tensor '" + s.name +
                       "' was submitted by " + ranks_string(job_ranks(s.submitted)) +
                       " but not by " + ranks_string(job_ranks(s.missing));
      if (stalled.size() > 1) {
        abort_message_ += " (and " + std::to_string(stalled.size() - 1) + " more stalled tensors)";
      }
      KOLO_LOG(kError, "stall") << abort_message_;
    }
  }
}

}  // namespace kolo::core
