// In-process transport: N ranks as threads of one process, for the unit tests.
//
// An InprocWorld is shared by the ranks; each rank's thread uses its own communicator
// (world.communicator(r)). Collectives meet at a barrier, read each other's buffers
// directly and meet again before returning, so results are deterministic. Fault
// injection: kill(r) makes rank r's next calls fail at once (a call already under way
// finishes, since the others may be reading its buffers) while the others wait until
// their deadline and then fail naming r, as with a real dead process.
// subset() makes a world of its own over the members (the same threads), grouped into
// hosts as their ranks were here; kill() of this world does not reach it.
// Not for: performance; every rank computes full reductions.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/communicator.h"

namespace kolo::transport {

class InprocWorld {
 public:
  // `local_size` ranks per simulated host (size must be a multiple of it; 0 = size).
  explicit InprocWorld(int size, int local_size = 0);
  // A world whose rank r is on simulated host hosts[r] (any ids; subset() uses it).
  explicit InprocWorld(std::vector<int> hosts);
  ~InprocWorld();

  int size() const { return size_; }
  // The communicator of rank r. Each may be taken once.
  std::unique_ptr<Communicator> communicator(int rank);
  // The communicator of a job of one process: one rank in a world of its own, which the
  // communicator keeps alive (the "local" transport).
  static std::unique_ptr<Communicator> single();
  // Simulates the death of rank r: its later calls fail at once; the others time out.
  void kill(int rank);

  // --- used by the communicators ---
  struct Slot {
    const void* send = nullptr;
    std::size_t bytes = 0;
    const std::vector<std::size_t>* sizes = nullptr;
    const std::string* text = nullptr;
    const std::vector<std::uint64_t>* words = nullptr;
    void* scratch = nullptr;
    // Control-plane calls: told about once a second while this rank waits for others.
    const Communicator::WaitObserver* observer = nullptr;
  };
  // Publishes rank's slot, waits for every rank, runs `read` (which may read every
  // slot), waits again so slots stay valid while others read. Fails on deadline naming
  // the ranks that did not arrive, or at once if this rank was killed before the call.
  template <typename Read>
  Status exchange(int rank, const Slot& mine, Deadline deadline, Read&& read) {
    KOLO_RETURN_IF_ERROR(arrive(rank, mine, deadline));
    read(static_cast<const std::vector<Slot>&>(slots_));
    return arrive(rank, Slot{}, deadline, /*keep_slot=*/true);
  }
  // Like exchange, with a third meeting: `first` runs after everyone published, `second`
  // after everyone finished `first`, and slots stay valid until everyone finished `second`.
  template <typename First, typename Second>
  Status exchange2(int rank, const Slot& mine, Deadline deadline, First&& first, Second&& second) {
    KOLO_RETURN_IF_ERROR(arrive(rank, mine, deadline));
    first(static_cast<const std::vector<Slot>&>(slots_));
    KOLO_RETURN_IF_ERROR(arrive(rank, Slot{}, deadline, /*keep_slot=*/true));
    second(static_cast<const std::vector<Slot>&>(slots_));
    return arrive(rank, Slot{}, deadline, /*keep_slot=*/true);
  }
  Topology topology_of(int rank) const;
  int host_of(int rank) const { return hosts_[rank]; }
  // The words of the ranks' cycle bell (cycle_bell.h): one shared request counter, one
  // futex word per rank.
  std::uint64_t* bell_requested() { return &bell_[0].requested; }
  std::vector<std::uint32_t*> bell_rings();

 private:
  struct alignas(128) BellLine {
    std::uint64_t requested = 0;  // used in line 0 only
    std::uint32_t ring = 0;
  };
  Status arrive(int rank, const Slot& mine, Deadline deadline, bool keep_slot = false);
  int topology_local_rank(int rank) const;

  const int size_;
  const std::vector<int> hosts_;  // simulated host of each rank
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;       // written under mu_ before the first barrier of a call
  std::vector<bool> arrived_;     // guarded by mu_
  std::vector<bool> dead_;        // guarded by mu_
  int arrivals_ = 0;              // guarded by mu_
  std::uint64_t generation_ = 0;  // guarded by mu_
  std::string broken_;            // guarded by mu_; set once a rank timed out
  std::vector<BellLine> bell_;    // atomics only (std::atomic_ref), one line per rank
};

}  // namespace kolo::transport
