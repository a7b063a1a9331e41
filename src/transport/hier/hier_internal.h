// Internals of the hierarchical transport: the HierarchicalCommunicator class.
//
// Not for use outside src/transport/hier/ (and its checks); everything else reaches this
// transport through hier_communicator.h and the Communicator interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/communicator.h"
#include "transport/shm/shm_communicator.h"

namespace kolo::transport::hier {

// Owned and used by one thread. Usable until the first peer failure of any of its parts;
// after that every call fails at once.
class HierarchicalCommunicator final : public Communicator, public AlgorithmSwitch {
 public:
  // `global`: the job's MPI communicator; `local`: this host's ranks (shm over MPI);
  // `cross`: the ranks with this local rank (MPI); `cross_ranks`: their global ranks;
  // `notices`: failure notices over `global`, already polled by `local` and `cross`.
  HierarchicalCommunicator(std::unique_ptr<Communicator> global,
                           std::unique_ptr<FailureNotices> notices,
                           std::unique_ptr<Communicator> local, std::unique_ptr<Communicator> cross,
                           const std::vector<int>& cross_ranks);
  // After a peer failure the parts are deliberately not destroyed: MPI's teardown
  // (MPI_Finalize) synchronises with the dead rank and could hang.
  ~HierarchicalCommunicator() override;

  const Topology& topology() const override { return global_->topology(); }
  const char* name() const override { return "hierarchical"; }
  // The control plane runs over the global communicator.
  void set_wait_observer(WaitObserver observer) override {
    global_->set_wait_observer(std::move(observer));
  }
  Communicator* global() const { return global_.get(); }
  // The options of the local segments (wrap_in_hierarchical): subset() uses them too.
  void set_shm_options(const ShmOptions& options) { shm_options_ = options; }
  // The base's subset of `ranks`, wrapped in shared memory when every member is on one
  // host (and there are several); otherwise the base's alone. No hierarchy inside a set.
  Status subset(const std::vector<int>& ranks, std::unique_ptr<Communicator>* out) override;
  Communicator* local() const { return local_.get(); }
  Communicator* cross() const { return cross_.get(); }

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
  void* fusion_buffer(std::size_t bytes) override;
  // Autotune may turn the hierarchical algorithm off: allreduce then runs on `global`.
  AlgorithmSwitch* algorithm_switch() override { return this; }
  bool hierarchical() const override { return hierarchical_; }
  void set_hierarchical(bool on) override { hierarchical_ = on; }

  Status control_and(std::vector<std::uint64_t>& words, Deadline deadline) override;
  Status control_gather(const std::string& mine, std::vector<std::string>* all,
                        Deadline deadline) override;
  Status control_broadcast(std::string* message, Deadline deadline) override;

 private:
  // "hierarchical allreduce on rank 3 of 4 (host 1 of 2, local rank 1 of 2): "
  std::string where(const char* op) const;
  Status check(const char* op) const;
  // A part's status; a peer failure there breaks this communicator too.
  Status record(Status s);

  // Destroyed in reverse order: the parts that poll notices_ first, global_ (which may
  // finalize MPI) last.
  std::unique_ptr<Communicator> global_;
  std::unique_ptr<FailureNotices> notices_;
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> cross_;
  ShmOptions shm_options_;
  std::string cross_names_;   // "ranks 1, 3": who takes part in this rank's cross phase
  std::string broken_;        // the first peer failure's message
  bool hierarchical_ = true;  // false: allreduce is global_'s (flat MPI)
};

}  // namespace kolo::transport::hier
