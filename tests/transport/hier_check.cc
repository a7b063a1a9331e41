// kolo_hier_check: end-to-end check of the hierarchical transport across real processes,
// with fake hosts (KOLO_TEST_HOSTS) on one machine, over the base transport KOLO_TRANSPORT
// names (check_job.h: mpi under mpirun, gloo under kolorun).
//
// The communicator comes from the transport table, as in a job. Checks that the topology
// follows the fake hosts, then allreduce for every dtype x op at 0, 1, 7 and 1024
// elements, and at 2^20 and 3 * 2^20 + 5 for the pairs check::large_case() picks (with
// KOLO_FUSION_THRESHOLD=1048576 these take several chunks), through the copy path, the
// fusion_buffer() zero-copy path and a mix, against a reference computed here from small-integer
// inputs (exact in every dtype) and byte for byte against the plain base communicator's allreduce
// of the same input; then the delegated operations. Prints PASS/FAIL per group; exits non-zero on
// any failure.
//
//   KOLO_TEST_HOSTS=2 mpirun -x KOLO_TEST_HOSTS -np 4 kolo_hier_check   correctness (mpi)
//   KOLO_TEST_HOSTS=2 kolorun -np 4 kolo_hier_check                     correctness (gloo)
//   ... kolo_hier_check --select hierarchical|mpi|gloo|shm              the table's choice
//   ... mpirun --enable-recovery ... kolo_hier_check --kill-rank 3       kill test
//   ... kolorun --grace-seconds 30 ... kolo_hier_check --kill-rank 3     kill test (gloo)
//   ... kolo_hier_check --bench                                          64 MiB timings
//
// Not for: the runtime's semantics (tests/multiprocess).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check_job.h"
#include "hier_check.h"
#include "transport/hier/hier_internal.h"
#include "transport/table.h"

namespace kolo::transport::hier_check {
namespace {

using namespace check;  // NOLINT: the check harness

void check_topology(Communicator* comm, int hosts, Checker& c) {
  const Topology& t = comm->topology();
  c.count();
  if (hosts <= 0) return;
  const int host = static_cast<int>(static_cast<long long>(t.rank) * hosts / t.size);
  int first = 0, size = 0;
  for (int r = 0; r < t.size; ++r) {
    if (static_cast<long long>(r) * hosts / t.size != host) continue;
    if (size++ == 0) first = r;
  }
  if (t.local_rank != t.rank - first || t.local_size != size || t.cross_rank != host ||
      t.cross_size != hosts) {
    c.fail("topology: local " + std::to_string(t.local_rank) + "/" + std::to_string(t.local_size) +
           " cross " + std::to_string(t.cross_rank) + "/" + std::to_string(t.cross_size) +
           ", expected local " + std::to_string(t.rank - first) + "/" + std::to_string(size) +
           " cross " + std::to_string(host) + "/" + std::to_string(hosts));
  }
}

// path 0: copy; 1: zero-copy (fusion_buffer); 2: zero-copy on even ranks only; 3: as 2
// with the hierarchical algorithm switched off (set_hierarchical(false), as autotune
// does: the flat base, also on the shm region). Path 0 is also run through the plain base
// communicator, whose bytes must be the same.
void check_allreduce(hier::HierarchicalCommunicator* comm, Checker& c) {
  const int n = comm->size(), me = comm->rank();
  std::vector<std::int64_t> want;
  std::vector<char> plain;
  for (DataType dt : kDtypes) {
    for (ReduceOp op : kOps) {
      for (std::size_t count : kSizes) {
        if (count > 1024 && !large_case(dt, op, /*every_sum=*/false)) continue;
        const std::size_t bytes = count * dtype_size(dt);
        want.resize(count);
        for (std::size_t i = 0; i < count; ++i) {
          std::int64_t v = input(0, i, dt, op);
          for (int r = 1; r < n; ++r) v = fold(dt, op, v, input(r, i, dt, op));
          want[i] = v;
        }
        const std::string what = std::string("allreduce ") + dtype_name(dt) + " " +
                                 reduce_op_name(op) + " count " + std::to_string(count);
        plain.resize(bytes);
        for (std::size_t i = 0; i < count; ++i) store(dt, plain.data(), i, input(me, i, dt, op));
        if (!c.expect_ok(comm->global()->allreduce(plain.data(), count, dt, op, soon()),
                         what + " (plain " + comm->global()->name() + ")"))
          return;
        for (int path = 0; path < 4; ++path) {
          void* region = comm->fusion_buffer(bytes);
          const bool zero_copy = path == 1 || (path >= 2 && me % 2 == 0);
          if (path > 0 && region == nullptr) continue;
          std::vector<char> own(zero_copy ? 0 : bytes);
          void* buf = zero_copy ? region : own.data();
          for (std::size_t i = 0; i < count; ++i) store(dt, buf, i, input(me, i, dt, op));
          const std::string where = what + " path " + std::to_string(path);
          c.count();
          comm->set_hierarchical(path != 3);
          const Status s = comm->allreduce(buf, count, dt, op, soon());
          comm->set_hierarchical(true);
          if (!c.expect_ok(s, where)) return;
          for (std::size_t i = 0; i < count; ++i) {
            if (load(dt, buf, i) != static_cast<double>(want[i])) {
              c.fail(where + ": element " + std::to_string(i) + " is " +
                     std::to_string(load(dt, buf, i)) + ", want " + std::to_string(want[i]));
              break;
            }
          }
          if (bytes > 0 && std::memcmp(buf, plain.data(), bytes) != 0)
            c.fail(where + ": bytes differ from the plain " + comm->global()->name() +
                   " communicator's allreduce");
        }
      }
    }
  }
}

void check_others(Communicator* comm, Checker& c) {
  const int n = comm->size(), me = comm->rank();
  for (int root = 0; root < n; ++root) {
    std::vector<std::uint8_t> buf(5000);
    for (std::size_t i = 0; i < buf.size(); ++i)
      buf[i] = me == root ? static_cast<std::uint8_t>(i * 7 + root) : 0;
    c.count();
    if (!c.expect_ok(comm->broadcast(buf.data(), buf.size(), root, soon()), "broadcast")) return;
    for (std::size_t i = 0; i < buf.size(); ++i) {
      if (buf[i] != static_cast<std::uint8_t>(i * 7 + root)) {
        c.fail("broadcast from " + std::to_string(root) + ": byte " + std::to_string(i));
        break;
      }
    }
  }
  for (int call = 0; call < 20; ++call) {
    std::vector<std::uint64_t> w(3);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = ~(std::uint64_t{1} << ((i + call + me) % 64));
    c.count();
    if (!c.expect_ok(comm->control_and(w, soon()), "control_and")) return;
    for (std::size_t i = 0; i < w.size(); ++i) {
      std::uint64_t want = ~std::uint64_t{0};
      for (int r = 0; r < n; ++r) want &= ~(std::uint64_t{1} << ((i + call + r) % 64));
      if (w[i] != want) c.fail("control_and call " + std::to_string(call));
    }
  }
  c.count();
  c.expect_ok(comm->barrier(soon()), "barrier");
  std::vector<std::int32_t> mine(me + 1, me), all(n * (n + 1) / 2);
  std::vector<std::size_t> sizes;
  for (int r = 0; r < n; ++r) sizes.push_back((r + 1) * sizeof(std::int32_t));
  c.count();
  if (c.expect_ok(comm->allgatherv(mine.data(), all.data(), sizes, soon()), "allgatherv")) {
    std::size_t k = 0;
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j <= r; ++j, ++k) {
        if (all[k] != r) c.fail("allgatherv value");
      }
    }
  }
}

}  // namespace
}  // namespace kolo::transport::hier_check

int main(int argc, char** argv) {
  using namespace kolo;
  using namespace kolo::transport;
  const std::string mode = argc > 1 ? argv[1] : "check";
  const std::string arg = argc > 2 ? argv[2] : "";
  check::CheckJob job;  // outlives the communicator: it holds the job's store
  Status s = check::open_check_job(&job);
  std::unique_ptr<Communicator> comm;
  if (s.ok()) s = create_communicator(*job.factory, job.context, &comm);
  if (!s.ok()) {
    std::printf("FAIL setup: %s\n", s.to_string().c_str());
    return 1;
  }
  if (mode == "--select") {
    const bool ok = arg == comm->name();
    std::printf("%s [rank %d] select: the transport table chose %s (expected %s)\n",
                ok ? "PASS" : "FAIL", comm->rank(), comm->name(), arg.c_str());
    return ok ? 0 : 1;
  }
  auto* hier = dynamic_cast<hier::HierarchicalCommunicator*>(comm.get());
  if (hier == nullptr) {
    std::printf(
        "FAIL [rank %d] the transport table chose %s, not hierarchical (set "
        "KOLO_TEST_HOSTS)\n",
        comm->rank(), comm->name());
    return 1;
  }
  if (mode == "--kill-rank") return hier_check::run_kill_test(hier, std::stoi(arg));
  if (mode == "--bench") {
    hier_check::run_bench(hier);
    return 0;
  }
  if (comm->rank() == 0) {
    std::printf("kolo_hier_check: %d ranks, hierarchical over %s\n", comm->size(),
                job.transport.c_str());
  }
  check::Checker c(comm.get(), std::chrono::seconds(60));
  hier_check::check_topology(comm.get(), job.context.test_hosts, c);
  c.end_group("hierarchical topology follows KOLO_TEST_HOSTS");
  hier_check::check_allreduce(hier, c);
  c.end_group(
      "hierarchical allreduce: every dtype x op, edge and large sizes, copy / zero-copy / mixed / "
      "switched "
      "off, = plain base");
  hier_check::check_others(comm.get(), c);
  c.end_group("hierarchical broadcast, control_and, barrier, allgatherv (delegated)");
  return c.failures() ? 1 : 0;
}
