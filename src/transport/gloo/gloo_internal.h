// Internals shared by the Gloo transport's source files: the GlooCommunicator class, the
// World its sub-communicators share (device, store, peers, watchdog), and the socket
// table that maps gloo's "ip:port" texts to ranks.
//
// Not for use outside src/transport/gloo/ (it includes gloo's headers); everything else
// reaches this transport through create_gloo_communicator() and the Communicator interface.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "rendezvous/store.h"
#include "transport/communicator.h"
#include "transport/gloo/gloo_communicator.h"

namespace kolo::transport::gloo_impl {

class GlooStore;

class GlooCommunicator;

// One connected TCP socket of a gloo context: which peer (member index) it talks to, and
// its inode (checked before shutdown(), so a number the kernel reused is left alone).
struct PairSocket {
  int fd = -1;
  unsigned long inode = 0;
  int member = -1;
  std::string local, peer;  // "ip:port"
};

// What every rank publishes about itself at connect time (world ranks).
struct PeerInfo {
  std::string host;  // gethostname(): the real host, also under KOLO_TEST_HOSTS
  int pid = 0;
};

// Watches the communicator whose call is blocked in gloo (one at a time: the owning thread
// makes every call). About every 20 ms it polls the call's interrupt; every 200 ms it
// looks for peers that are gone (same-host processes that exited, the launcher's exit
// notices). When it finds a cause it records it and shuts the communicator's sockets down,
// which ends the blocked call (gloo sees EOF on every pair) and tells the peers.
class Watchdog {
 public:
  Watchdog();
  ~Watchdog();
  void begin(GlooCommunicator* comm);
  // Ends the watch; returns the cause found during it ("" when none).
  std::string end();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  GlooCommunicator* active_ = nullptr;  // guarded by mu_
  Clock::time_point since_{};
  Clock::time_point last_tick_{};  // the last wait-observer tick of this watch
  bool checking_ = false;
  bool stop_ = false;
  std::string cause_;
  std::thread thread_;
};

// Shared by a world communicator and every communicator made from it (they hold it by
// shared_ptr, so it lives until the last of them).
struct World {
  GlooOptions options;
  std::shared_ptr<rendezvous::Store> store;  // the job's store (launcher keys at its root)
  std::shared_ptr<::gloo::transport::Device> device;
  std::vector<PeerInfo> peers;  // by world rank
  std::string my_host;
  std::int64_t exits_at_start = 0;  // launcher/exits when the world was made
  std::unique_ptr<Watchdog> watchdog;
  // Where the failure notices live once create_failure_notices() made them (null before),
  // and how this rank's own announcement there begins ("rank 3 reported: ").
  std::shared_ptr<rendezvous::Store> notice_store;
  std::string own_notice;
  // Every live communicator of this world (to shut all sockets down on announce()).
  std::mutex comms_mu;
  std::vector<GlooCommunicator*> comms;
};

// Owned and used by one thread (the watchdog only reads its sockets and interrupt while
// that thread is blocked in gloo). State goes from usable to broken only.
class GlooCommunicator final : public Communicator {
 public:
  static Status create_world(const GlooOptions& options, std::shared_ptr<rendezvous::Store> store,
                             std::unique_ptr<Communicator>* out);
  ~GlooCommunicator() override;

  const Topology& topology() const override { return topology_; }
  const char* name() const override { return label_; }

  Status allreduce(void* buffer, std::size_t count, DataType dtype, ReduceOp op,
                   Deadline deadline) override;
  Status allgatherv(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    Deadline deadline) override;
  Status broadcast(void* buffer, std::size_t bytes, int root, Deadline deadline) override;
  Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                   const std::vector<std::size_t>& recv_bytes, Deadline deadline) override;
  Status reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                       DataType dtype, ReduceOp op, Deadline deadline) override;
  Status barrier(Deadline deadline) override;
  bool reduces_pieces() const override { return true; }
  // Gloo's pairs and buffers are not tied to a thread.
  bool calls_from_any_thread() const override { return true; }
  Status allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                          Deadline deadline) override;

  Status split_by_host(HostGroup group, std::unique_ptr<Communicator>* out,
                       std::vector<int>* world_ranks) override;
  Status subset(const std::vector<int>& ranks, std::unique_ptr<Communicator>* out) override;
  Status create_failure_notices(std::unique_ptr<FailureNotices>* out) override;
  Status set_interrupt(Interrupt interrupt) override {
    interrupt_ = std::move(interrupt);
    return Status::OK();
  }

  Status control_and(std::vector<std::uint64_t>& words, Deadline deadline) override;
  Status control_gather(const std::string& mine, std::vector<std::string>* all,
                        Deadline deadline) override;
  Status control_broadcast(std::string* message, Deadline deadline) override;

  // --- for the watchdog and the notices (gloo_watch.cc) ---
  // Polls the interrupt (if any).
  bool poll_interrupt(std::string* why);
  // Members whose process is gone or whose exit the launcher announced, as a sentence
  // ("" when none). With `wait`, waits up to 2 s for a launcher notice (launcher_notices);
  // a member seen gone here gets up to 0.5 s for its notice, which says why it went.
  std::string gone_peers(bool wait);
  // The launcher's exit notices of members other than this rank (past exits_at_start),
  // "; "-joined ("" when none); sets (*noticed)[member] for each one found.
  std::string member_notices(std::vector<bool>* noticed);
  // The launcher's exit notices of members (past exits_at_start), as a sentence ("" when
  // none): what gone_peers reports from the store, without waiting and without the peers'
  // pids (known only once connected). Watches connect()'s rendezvous.
  std::string launcher_exits();
  // The first failure another member of this communicator recorded (fail()), as
  // "rank 1 failed first: <its reason>", or "" when none did: one store read while none did.
  std::string failed_members();
  // What `member` recorded when its call failed (fail/<member>), as "rank 1 failed first:
  // <its reason>", or "" when it recorded nothing.
  std::string recorded_failure(int member);
  // Another rank's failure notice ("rank 1 reported: ..."), or "" when none was announced.
  std::string announced_failure();
  // shutdown(SHUT_RDWR) on every socket of this communicator's context, and aborts the
  // data wait under way (wait_data), if any; later data waits return false at once.
  void shutdown_sockets();
  // The wait observer's tick (about once a second while rank 0 waits in the control
  // plane): aborts the any-source wait, which the waiting thread takes as "look again,
  // then report" (take_tick). False (nothing done) without an observer or such a wait, or
  // while a tick is under way.
  bool tick_observer();
  // Every watchdog poll: the tick's second abort, once the waiting thread has looked
  // again for 50 ms (take_tick). True when it aborted.
  bool confirm_tick();
  void set_wait_observer(WaitObserver observer) override { observer_ = std::move(observer); }
  const std::shared_ptr<World>& world() const { return world_; }
  rendezvous::Store& store() { return *store_; }

 private:
  GlooCommunicator() = default;
  // Rendezvous of `members` (world ranks, this rank among them) under `prefix`.
  Status connect(std::shared_ptr<World> world, std::vector<int> members, const std::string& prefix,
                 const char* label, Deadline deadline);
  // Reads every member's socket list and keeps this rank's sockets to members.
  // `watched` waits for the other members' records as connect()'s rendezvous does: an
  // exit the launcher published ends the wait (a member killed just after the mesh formed
  // once left a survivor here until the 630 s deadline).
  Status map_sockets(const std::vector<PairSocket>& fresh, GlooStore& watched, Deadline deadline);

  // Runs `body` (gloo calls; returns a Status for failures it finds itself) under the
  // watchdog, catching every exception; failures break the communicator.
  template <typename Body>
  Status guarded(const char* op, Deadline deadline, Body&& body);
  // Breaks the communicator: explains `gloo_error` (or `cause`), publishes the reason for
  // the peers, shuts the sockets down and returns the kPeerFailure.
  Status fail(const char* op, Clock::time_point start, Deadline deadline,
              const std::string& gloo_error, const std::string& cause);
  Status check_usable(const char* op) const;
  std::string where(const char* op) const;
  // reducescatter's ring (gloo_ops.cc), inside guarded(): throws what gloo throws.
  Status ring_reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                            DataType dtype, ReduceOp op, Deadline deadline);
  // kolo's pipelined ring allreduce of the pieces' concatenation (gloo_ring.cc), unscaled,
  // inside guarded(): throws what gloo throws.
  Status ring_allreduce(const std::vector<AllreducePiece>& pieces, DataType dtype, ReduceOp op,
                        Deadline deadline);
  // Waits for `buffer`'s receive (or, with `send`, its send) within the deadline; false
  // when aborted. The watchdog aborts it when it finds a cause (shutdown_sockets): gloo
  // fails the waits of a pair's pending messages when the pair fails, but not the wait of
  // a message that is partly transferred (tcp::Pair::signalException skips the in-flight
  // read and write), which would last until the deadline (a peer killed mid-segment kept
  // a hierarchical job's host leader waiting 3 s for its deadline, CI, 2026-12-07).
  bool wait_data(::gloo::transport::UnboundBuffer* buffer, bool send, Deadline deadline);
  // gloo's timeout for a call bounded by `deadline`: the time left, at least 1 ms.
  std::chrono::milliseconds timeout(Deadline deadline) const;
  std::uint32_t next_tag() { return ++tag_; }
  std::uint64_t next_slot(int n = 1);
  // "rank 2" or "rank 2 (world rank 5)".
  std::string member_name(int member) const;

  std::shared_ptr<World> world_;
  std::shared_ptr<::gloo::Context> context_;
  std::shared_ptr<rendezvous::Store> store_;  // this communicator's prefix view
  std::string prefix_;
  std::vector<int> members_;  // world rank of each member
  Topology topology_;
  std::vector<std::string> hosts_;  // topology host name of each member
  const char* label_ = "gloo";
  std::vector<PairSocket> sockets_;
  std::vector<std::vector<std::string>> listens_;  // each member's pairs' listening addresses
  Interrupt interrupt_;
  bool broken_ = false;
  std::string broken_reason_;
  std::uint32_t tag_ = 0;
  std::uint64_t slot_ = 0;
  int splits_ = 0;
  std::vector<char> scratch_;
  std::vector<char> ring_scratch_, stage_, packed_;  // ring_allreduce's, allreduce_pieces'
  std::vector<std::uint64_t> words_;
  // The buffer rank 0 waits on for a message from any rank (gloo_control.cc): such a wait
  // is the context's, not a pair's, so closing sockets does not end it; the watchdog
  // aborts it instead. Guarded by waiting_mu_.
  std::mutex waiting_mu_;
  ::gloo::transport::UnboundBuffer* waiting_ = nullptr;
  // The data wait under way (wait_data) and whether it is a send's; sockets_down_ once
  // shutdown_sockets ran (the communicator is failing). Guarded by waiting_mu_.
  ::gloo::transport::UnboundBuffer* data_wait_ = nullptr;
  bool data_wait_send_ = false;
  bool sockets_down_ = false;
  // A tick's steps (guarded by waiting_mu_): kTicked, the watchdog aborted the wait;
  // kLooking (since looking_since_), the waiting thread waits again; kConfirmed, the
  // watchdog aborted that wait too. Each control call starts at kNone (reset_tick).
  enum class Tick { kNone, kTicked, kLooking, kConfirmed };
  Tick tick_ = Tick::kNone;
  Clock::time_point looking_since_{};
  WaitObserver observer_;      // set by the owning thread between calls
  bool has_observer_ = false;  // guarded by waiting_mu_ (the watchdog reads it)

 public:
  // Sets (or clears, with nullptr) the any-source buffer the watchdog may abort.
  void set_waiting(::gloo::transport::UnboundBuffer* buffer) {
    std::lock_guard<std::mutex> lock(waiting_mu_);
    waiting_ = buffer;
    has_observer_ = static_cast<bool>(observer_);
  }
  // At the start of a control call's any-source waits: no tick under way (one that
  // landed after the previous call's last wait ended is dropped with its buffer).
  void reset_tick() {
    std::lock_guard<std::mutex> lock(waiting_mu_);
    tick_ = Tick::kNone;
  }
  // After an any-source wait returned false: true when the abort was a tick's, and the
  // caller waits on; false for any other abort. A message that completes in the instant
  // of an abort is counted by gloo but not returned (the abort wins), and the next wait
  // returns it at once: so a tick's first abort only starts a second wait (kLooking),
  // which takes such a message, and the watchdog ends that wait 50 ms on; only then are
  // the ranks still `missing` reported to the observer, with `waited`. Without this a rank
  // on time was named ("waited 2 s in negotiation for ranks 1, 3", rank 1's message in
  // the same millisecond as the tick).
  bool take_tick(Clock::duration waited, const std::vector<int>& missing);
  // KOLO_TEST_TICK_RACE=1 (test-only): rank 0's first any-source wait of each control
  // call first sleeps 500 ms, so that the peers' messages have arrived, and then ticks
  // (tick_observer's abort): the race take_tick handles, every time.
  void test_tick_race();
};

template <typename Body>
Status GlooCommunicator::guarded(const char* op, Deadline deadline, Body&& body) {
  KOLO_RETURN_IF_ERROR(check_usable(op));
  const auto start = Clock::now();
  world_->watchdog->begin(this);
  std::string error;
  Status s;
  try {
    s = body();
  } catch (const std::exception& e) {  // gloo::Exception and gloo::EnforceNotMet alike
    error = e.what();
    if (error.empty()) error = "an exception without a message";
  }
  const std::string cause = world_->watchdog->end();
  if (error.empty() && s.ok()) return s;
  if (error.empty() && s.code() != ErrorCode::kPeerFailure) return s;
  return fail(op, start, deadline, error, cause.empty() ? s.message() : cause);
}

// Every (dtype, op) through kolo's kernels (common/reduce.h), as gloo's reduce function.
void gloo_reduce(void* c, const void* a, const void* b, std::size_t n, DataType dtype, ReduceOp op);

// --- sockets and processes (gloo_sockets.cc) ---
// The sockets of this process: inode -> fd.
std::map<unsigned long, int> socket_fds();
// "ip:port" of a socket's own end (`peer` false) or its peer's; "" on failure.
std::string socket_address(int fd, bool peer);
// Whether process `pid` of this host has exited (gone or a zombie).
bool process_gone(int pid);
// The "ip:port" texts in a gloo message, in order, each also with its port byte-swapped
// first (Debian's gloo prints ports in network byte order).
std::vector<std::string> addresses_in(const std::string& text);

}  // namespace kolo::transport::gloo_impl
