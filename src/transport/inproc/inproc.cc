#include "transport/inproc/inproc.h"
#include "common/format.h"

#include <algorithm>
#include <cstring>

#include "common/reduce.h"

namespace kolo::transport {
namespace {

class InprocCommunicator final : public Communicator {
 public:
  InprocCommunicator(InprocWorld* world, int rank, std::shared_ptr<InprocWorld> owned = nullptr)
      : owned_(std::move(owned)),
        world_(world),
        rank_(rank),
        topology_(world->topology_of(rank)),
        bell_(world->bell_requested(), world->bell_rings(), rank) {}

  const Topology& topology() const override { return topology_; }
  const char* name() const override { return "inproc"; }

  Status allreduce(void* buffer, std::size_t count, DataType dtype, ReduceOp op,
                   Deadline deadline) override {
    // Rank r reduces slice r of the result into rank 0's scratch (O(size x count) work in
    // all), then every rank copies the whole result.
    const std::size_t esize = dtype_size(dtype);
    std::vector<std::byte> scratch(rank_ == 0 ? count * esize : 0);
    InprocWorld::Slot mine{buffer, count * esize};
    mine.scratch = scratch.data();
    const int n = size();
    const std::size_t lo = count * rank_ / n, hi = count * (rank_ + 1) / n;
    return world_->exchange2(
        rank_, mine, deadline,
        [&](const auto& slots) {
          if (hi == lo) return;
          auto at = [&](const void* p) { return static_cast<const std::byte*>(p) + lo * esize; };
          auto* out = static_cast<std::byte*>(slots[0].scratch) + lo * esize;
          std::memcpy(out, at(slots[0].send), (hi - lo) * esize);
          for (int r = 1; r < n; ++r) reduce_into(out, at(slots[r].send), hi - lo, dtype, op);
        },
        [&](const auto& slots) {
          if (count) std::memcpy(buffer, slots[0].scratch, count * esize);
        });
  }

  Status allgatherv(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    Deadline deadline) override {
    InprocWorld::Slot mine{send, recv_bytes[rank_]};
    return world_->exchange(rank_, mine, deadline, [&](const auto& slots) {
      auto* out = static_cast<std::byte*>(recv);
      for (std::size_t r = 0; r < slots.size(); ++r) {
        if (recv_bytes[r]) std::memcpy(out, slots[r].send, recv_bytes[r]);
        out += recv_bytes[r];
      }
    });
  }

  Status broadcast(void* buffer, std::size_t bytes, int root, Deadline deadline) override {
    InprocWorld::Slot mine{buffer, bytes};
    return world_->exchange(rank_, mine, deadline, [&](const auto& slots) {
      if (rank_ != root && bytes) std::memcpy(buffer, slots[root].send, bytes);
    });
  }

  Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                   const std::vector<std::size_t>& recv_bytes, Deadline deadline) override {
    InprocWorld::Slot mine{send, 0, &send_bytes};
    return world_->exchange(rank_, mine, deadline, [&](const auto& slots) {
      auto* out = static_cast<std::byte*>(recv);
      for (std::size_t r = 0; r < slots.size(); ++r) {
        // Rank r's block for me starts after its blocks for ranks < me.
        const auto& theirs = *slots[r].sizes;
        std::size_t offset = 0;
        for (int j = 0; j < rank_; ++j) offset += theirs[j];
        if (recv_bytes[r]) {
          std::memcpy(out, static_cast<const std::byte*>(slots[r].send) + offset, recv_bytes[r]);
        }
        out += recv_bytes[r];
      }
    });
  }

  Status reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                       DataType dtype, ReduceOp op, Deadline deadline) override {
    const std::size_t esize = dtype_size(dtype);
    std::size_t offset = 0;
    for (int j = 0; j < rank_; ++j) offset += counts[j];
    const std::size_t bytes = counts[rank_] * esize;
    InprocWorld::Slot mine{send, 0};
    return world_->exchange(rank_, mine, deadline, [&](const auto& slots) {
      if (bytes == 0) return;
      auto at = [&](std::size_t r) {
        return static_cast<const std::byte*>(slots[r].send) + offset * esize;
      };
      std::memcpy(recv, at(0), bytes);
      for (std::size_t r = 1; r < slots.size(); ++r) {
        reduce_into(recv, at(r), counts[rank_], dtype, op);
      }
    });
  }

  Status barrier(Deadline deadline) override {
    return world_->exchange(rank_, {}, deadline, [](const auto&) {});
  }

  CycleBell* cycle_bell() override { return &bell_; }
  bool calls_from_any_thread() const override { return true; }

  Status control_and(std::vector<std::uint64_t>& words, Deadline deadline) override {
    std::vector<std::uint64_t> result = words;
    InprocWorld::Slot mine;
    mine.words = &words;
    mine.observer = observer();
    KOLO_RETURN_IF_ERROR(world_->exchange(rank_, mine, deadline, [&](const auto& slots) {
      for (const auto& s : slots) {
        for (std::size_t i = 0; i < result.size(); ++i) result[i] &= (*s.words)[i];
      }
    }));
    words = std::move(result);
    return Status::OK();
  }

  Status control_gather(const std::string& mine_text, std::vector<std::string>* all,
                        Deadline deadline) override {
    InprocWorld::Slot mine;
    mine.text = &mine_text;
    mine.observer = observer();
    return world_->exchange(rank_, mine, deadline, [&](const auto& slots) {
      if (rank_ != 0) return;
      all->clear();
      for (const auto& s : slots) all->push_back(*s.text);
    });
  }

  Status control_broadcast(std::string* message, Deadline deadline) override {
    std::string copy;
    InprocWorld::Slot mine;
    mine.text = message;
    mine.observer = observer();
    KOLO_RETURN_IF_ERROR(world_->exchange(rank_, mine, deadline, [&](const auto& slots) {
      if (rank_ != 0) copy = *slots[0].text;
    }));
    if (rank_ != 0) *message = std::move(copy);
    return Status::OK();
  }

  void set_wait_observer(WaitObserver observer) override { observer_ = std::move(observer); }

  // Rank 0 makes the members' world and publishes it; every member takes a share of it.
  Status subset(const std::vector<int>& ranks, std::unique_ptr<Communicator>* out) override {
    out->reset();
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size() || (i > 0 && ranks[i] <= ranks[i - 1])) {
        return InvalidArgument(
            "inproc subset: the ranks must be distinct, ascending ranks in [0, " +
            std::to_string(size()) + ")");
      }
    }
    std::shared_ptr<InprocWorld> made;
    if (rank_ == 0) {
      std::vector<int> hosts;
      for (int r : ranks) hosts.push_back(world_->host_of(r));
      made = std::make_shared<InprocWorld>(std::move(hosts));
    }
    InprocWorld::Slot mine;
    mine.scratch = &made;
    std::shared_ptr<InprocWorld> world;
    // subset() takes no deadline (MPI_Comm_split has none); a minute bounds the meeting.
    const Deadline deadline = Clock::now() + std::chrono::seconds(60);
    KOLO_RETURN_IF_ERROR(world_->exchange(rank_, mine, deadline, [&](const auto& slots) {
      world = *static_cast<const std::shared_ptr<InprocWorld>*>(slots[0].scratch);
    }));
    const auto it = std::find(ranks.begin(), ranks.end(), rank_);
    if (it == ranks.end()) return Status::OK();
    InprocWorld* raw = world.get();
    *out = std::make_unique<InprocCommunicator>(raw, static_cast<int>(it - ranks.begin()),
                                                std::move(world));
    return Status::OK();
  }

 private:
  const WaitObserver* observer() const { return observer_ ? &observer_ : nullptr; }

  std::shared_ptr<InprocWorld> owned_;  // single(): the world this communicator keeps alive
  InprocWorld* world_;
  int rank_;
  Topology topology_;
  FutexCycleBell bell_;
  WaitObserver observer_;
};

}  // namespace

namespace {
std::vector<int> uniform_hosts(int size, int local_size) {
  if (local_size <= 0) local_size = size;
  std::vector<int> hosts(size);
  for (int r = 0; r < size; ++r) hosts[r] = r / local_size;
  return hosts;
}
}  // namespace

InprocWorld::InprocWorld(int size, int local_size) : InprocWorld(uniform_hosts(size, local_size)) {}

InprocWorld::InprocWorld(std::vector<int> hosts)
    : size_(static_cast<int>(hosts.size())),
      hosts_(std::move(hosts)),
      slots_(size_),
      arrived_(size_, false),
      dead_(size_, false),
      bell_(size_) {}

std::vector<std::uint32_t*> InprocWorld::bell_rings() {
  std::vector<std::uint32_t*> rings;
  for (auto& line : bell_) rings.push_back(&line.ring);
  return rings;
}

InprocWorld::~InprocWorld() = default;

std::unique_ptr<Communicator> InprocWorld::communicator(int rank) {
  return std::make_unique<InprocCommunicator>(this, rank);
}

std::unique_ptr<Communicator> InprocWorld::single() {
  auto world = std::make_shared<InprocWorld>(1);
  InprocWorld* raw = world.get();
  return std::make_unique<InprocCommunicator>(raw, 0, std::move(world));
}

// local: the ranks of this rank's host; cross: the ranks with this local rank, in order.
Topology InprocWorld::topology_of(int rank) const {
  Topology t;
  t.rank = rank;
  t.size = size_;
  t.local_rank = topology_local_rank(rank);
  t.local_size = 0;
  for (int r = 0; r < size_; ++r) t.local_size += hosts_[r] == hosts_[rank] ? 1 : 0;
  t.cross_rank = t.cross_size = 0;
  for (int r = 0; r < size_; ++r) {
    if (topology_local_rank(r) != t.local_rank) continue;
    if (r < rank) ++t.cross_rank;
    ++t.cross_size;
  }
  return t;
}

int InprocWorld::topology_local_rank(int rank) const {
  int local = 0;
  for (int r = 0; r < rank; ++r) local += hosts_[r] == hosts_[rank] ? 1 : 0;
  return local;
}

void InprocWorld::kill(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  dead_[rank] = true;
}

// A generation-counted barrier. The slot is published in the same critical section as
// the arrival, so every reader that passes the barrier sees it.
Status InprocWorld::arrive(int rank, const Slot& mine, Deadline deadline, bool keep_slot) {
  std::unique_lock<std::mutex> lock(mu_);
  // A killed rank fails when it starts an exchange. One it is already in runs to the end:
  // the others may still be reading its slot, which points into memory it would free
  // on the way out.
  if (dead_[rank] && !keep_slot) {
    return PeerFailure("rank " + std::to_string(rank) + " was killed (inproc fault injection)");
  }
  if (!broken_.empty()) return PeerFailure(broken_);
  if (!keep_slot) slots_[rank] = mine;
  arrived_[rank] = true;
  const std::uint64_t gen = generation_;
  if (++arrivals_ == size_) {
    arrivals_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    ++generation_;
    cv_.notify_all();
    return Status::OK();
  }
  const auto pred = [&] { return generation_ != gen || !broken_.empty(); };
  const auto start = Clock::now();
  auto next_report = start + std::chrono::seconds(1);
  bool passed = false;
  for (;;) {
    passed = cv_.wait_until(lock, mine.observer ? std::min(deadline, next_report) : deadline, pred);
    const auto now = Clock::now();
    if (passed || now >= deadline) break;
    if (now < next_report) continue;
    next_report = now + std::chrono::seconds(1);
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!arrived_[r]) missing.push_back(r);
    }
    lock.unlock();
    (*mine.observer)(now - start, missing);
    lock.lock();
  }
  if (passed && generation_ != gen) return Status::OK();
  if (!broken_.empty()) return PeerFailure(broken_);
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (!arrived_[r]) missing.push_back(r);
  }
  broken_ = ranks_string(missing) +
            " did not take part in a collective before the deadline (dead or hung?)";
  cv_.notify_all();
  return PeerFailure(broken_);
}

}  // namespace kolo::transport
