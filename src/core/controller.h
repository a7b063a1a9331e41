// Controller: one process set's negotiation cycle, run by the background thread.
//
// Each cycle every rank of the set:
//   1. sorts its new requests into cache hits (a bit) and uncached requests;
//   2. takes part in one control_and of [flags | hit bits | invalid bits]: flags and
//      invalid bits are sent inverted so the AND computes their OR;
//   3. erases cache entries some rank found invalid, and takes the fast path: cached
//      responses whose bit every rank set, in bit order;
//   4. if any rank has uncached requests (or has joined, or the coordinator must speak),
//      takes the slow path: request lists are gathered on rank 0, which validates them
//      (negotiation.h), checks for stalls and broadcasts the ordered responses;
//   5. adds new cacheable responses to the cache (the same order everywhere).
// Every rank thus gets the same response list in the same order. Not for: executing
// responses (Runtime) or the wire (Communicator).
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/message.h"
#include "core/negotiation.h"
#include "core/response_cache.h"
#include "startup/config.h"
#include "transport/communicator.h"

namespace kolo::core {

class Controller {
 public:
  // `comm` must outlive the controller (it removes its wait observer from it). A process
  // set other than the global one passes its id and its members' global ranks (by set
  // rank), so that warnings and error responses name the ranks of the job.
  Controller(const Config& config, transport::Communicator* comm, int set_id = 0,
             std::vector<int> members = {});
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Why this rank stops: kolo::shutdown(), or the program ending without it.
  enum class Leave { kNo, kShutdown, kExit };

  struct Cycle {
    std::vector<Response> responses;  // execute in this order
    bool shutdown = false;            // some rank called shutdown() or ended its program
    std::vector<int> shutdown_ranks;  // ranks that called kolo::shutdown()
    std::vector<int> exited_ranks;    // ranks whose program ended without it
    Status fatal;                     // peer failure or stall shutdown: stop the runtime
    bool idle = true;                 // no rank had anything to negotiate or run
    bool has_tunables = false;        // switch to `tunables` after executing `responses`
    Tunables tunables;
  };
  // `busy_elsewhere`: this rank has work in another process set; every rank's cycle is
  // then not idle (so timer-paced ranks that are not in that set keep up with it).
  Cycle run(std::vector<Request> new_requests, Leave leave, bool busy_elsewhere = false);

  // Coordinator (rank 0) only: announce new tunables to every rank with the next cycle
  // (which then takes the slow path).
  void propose(const Tunables& tunables);
  // The coordinator has something to send in the next cycle even if no rank submits
  // anything (an autotune proposal, a stall abort): the runtime asks for one.
  bool wants_cycle() const { return has_proposal_ || !abort_message_.empty(); }

  transport::Communicator& communicator() { return *comm_; }

  // For tests and logs.
  std::uint64_t fast_cycles() const { return fast_cycles_; }
  std::uint64_t slow_cycles() const { return slow_cycles_; }
  const ResponseCache& cache() const { return cache_; }

 private:
  struct Hit {
    Request request;
    Clock::time_point since;
  };
  enum Flag : std::uint64_t {
    kUncached = 1,
    kShutdown = 2,
    kJoined = 4,
    kCoordinator = 8,
    kBusyElsewhere = 16,
  };

  void sort_new(std::vector<Request> requests, Clock::time_point now,
                std::vector<std::uint64_t>* invalid);
  Status slow_path(Clock::time_point now, ResponseList* list);
  void check_stalls(Clock::time_point now);
  // What a stall warning tells the user to do, and what happens next.
  std::string stall_advice() const;
  // Coordinator: the transport says it has waited `waited` in a control call for the
  // ranks `missing`: warn once per KOLO_STALL_CHECK_SECONDS once past it.
  void warn_waiting(transport::Clock::duration waited, const std::vector<int>& missing);
  // Names of this rank's requests that wait for negotiation ("'a', 'b'", at most 5).
  std::string pending_names() const;
  void renegotiate_hit(int bit);
  // Set ranks as the job's ranks (the identity for the global set).
  std::vector<int> job_ranks(const std::vector<int>& set_ranks) const;
  transport::Deadline deadline() const;

  const Config& config_;
  transport::Communicator* comm_;
  const int set_id_;
  const std::vector<int> members_;  // empty for the global set
  // "process set 2 (ranks 1, 3 of the job as its ranks 0, 1): ", or "" for the global set.
  const std::string set_prefix_;
  const int words_;       // 64-bit words per cache bit vector
  const int rank_words_;  // 64-bit words per bit vector of ranks
  ResponseCache cache_;
  MessageTable table_;                             // used on the coordinator (rank 0) only
  std::vector<Request> uncached_;                  // to send on the next slow path
  std::map<int, Hit> hits_;                        // cache bit -> pending request
  std::unordered_map<std::string, Request> sent_;  // sent to the coordinator, unanswered
  bool joined_ = false;
  std::string abort_message_;  // coordinator: stall shutdown to announce
  bool has_proposal_ = false;  // coordinator: tunables to announce
  Tunables proposal_;
  Clock::time_point next_stall_check_{};
  std::unordered_map<std::string, Clock::time_point> warned_;  // stalled name -> last warning
  Clock::time_point last_wait_warning_{};  // coordinator: last warn_waiting() message
  std::uint64_t fast_cycles_ = 0;
  std::uint64_t slow_cycles_ = 0;
  std::vector<std::uint64_t> invalid_, words_scratch_;  // run()'s, kept to reuse their memory
};

}  // namespace kolo::core
