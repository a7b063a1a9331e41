// kolo_shm_check: end-to-end check of the shm transport across real processes, over the
// base transport KOLO_TRANSPORT names (check_job.h: mpi under mpirun, gloo under kolorun).
//
// Checks allreduce for every dtype x op at 0, 1, 7 and 1024 elements, and at 2^20 and
// 3 * 2^20 + 5 for the pairs check::large_case() picks (with KOLO_FUSION_THRESHOLD=1048576
// these take several chunks), through the copy path, the fusion_buffer() zero-copy path and a mix
// of both, against a reference computed here from deterministic small-integer inputs (exact in
// every dtype); broadcast from every root, control_and, barrier and a delegated allgatherv. Prints
// PASS/FAIL per group; exits non-zero on any failure.
//
//   mpirun -np 3 kolo_shm_check                          correctness (over mpi)
//   kolorun -np 3 kolo_shm_check                         correctness (over gloo)
//   mpirun -np 2 kolo_shm_check --select shm|mpi         the transport table's choice
//   mpirun --enable-recovery -np 3 kolo_shm_check --kill-rank 2
//   kolorun --grace-seconds 30 -np 3 kolo_shm_check --kill-rank 2
//   kolorun -np 2 kolo_shm_check --bench
//
// Not for: the runtime's semantics (tests/multiprocess).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check_harness.h"
#include "check_job.h"
#include "common/reduce.h"
#include "shm_check.h"
#include "transport/shm/shm_communicator.h"
#include "transport/table.h"

namespace kolo::transport::shm_check {
namespace {

using namespace check;  // NOLINT: the check harness

// path 0: copy; 1: zero-copy (fusion_buffer); 2: zero-copy on even ranks only.
void check_allreduce(Communicator* comm, Checker& c) {
  const int n = comm->size(), me = comm->rank();
  std::vector<std::int64_t> want;
  for (DataType dt : kDtypes) {
    for (ReduceOp op : kOps) {
      for (std::size_t count : kSizes) {
        if (count > 1024 && !large_case(dt, op)) continue;
        const std::size_t bytes = count * dtype_size(dt);
        want.resize(count);
        for (std::size_t i = 0; i < count; ++i) {
          std::int64_t v = input(0, i, dt, op);
          for (int r = 1; r < n; ++r) v = fold(dt, op, v, input(r, i, dt, op));
          want[i] = v;
        }
        for (int path = 0; path < 3; ++path) {
          void* region = comm->fusion_buffer(bytes);
          const bool zero_copy = path == 1 || (path == 2 && me % 2 == 0);
          if (path > 0 && region == nullptr) continue;
          std::vector<char> own(zero_copy ? 0 : bytes);
          void* buf = zero_copy ? region : own.data();
          for (std::size_t i = 0; i < count; ++i) store(dt, buf, i, input(me, i, dt, op));
          const std::string what = std::string("allreduce ") + dtype_name(dt) + " " +
                                   reduce_op_name(op) + " count " + std::to_string(count) +
                                   " path " + std::to_string(path);
          c.count();
          if (!c.expect_ok(comm->allreduce(buf, count, dt, op, soon()), what)) return;
          for (std::size_t i = 0; i < count; ++i) {
            if (load(dt, buf, i) != static_cast<double>(want[i])) {
              c.fail(what + ": element " + std::to_string(i) + " is " +
                     std::to_string(load(dt, buf, i)) + ", want " + std::to_string(want[i]));
              break;
            }
          }
        }
      }
    }
  }
}

void check_others(Communicator* comm, Checker& c) {
  const int n = comm->size(), me = comm->rank();
  for (std::size_t bytes :
       {std::size_t{0}, std::size_t{1}, std::size_t{5000}, (std::size_t{3} << 20) + 7}) {
    for (int root = 0; root < n; ++root) {
      std::vector<std::uint8_t> buf(bytes);
      for (std::size_t i = 0; i < bytes; ++i)
        buf[i] = me == root ? static_cast<std::uint8_t>(i * 7 + root) : 0;
      c.count();
      if (!c.expect_ok(comm->broadcast(buf.data(), bytes, root, soon()), "broadcast")) return;
      for (std::size_t i = 0; i < bytes; ++i) {
        if (buf[i] != static_cast<std::uint8_t>(i * 7 + root)) {
          c.fail("broadcast from " + std::to_string(root) + " of " + std::to_string(bytes) +
                 " bytes: byte " + std::to_string(i));
          break;
        }
      }
    }
  }
  for (int call = 0; call < 300; ++call) {
    const std::size_t words_n = call % 3 == 0 ? 1 : call % 3 == 1 ? 17 : 600;
    std::vector<std::uint64_t> w(words_n);
    for (std::size_t i = 0; i < words_n; ++i) w[i] = ~(std::uint64_t{1} << ((i + call + me) % 64));
    c.count();
    if (!c.expect_ok(comm->control_and(w, soon()), "control_and")) return;
    for (std::size_t i = 0; i < words_n; ++i) {
      std::uint64_t want = ~std::uint64_t{0};
      for (int r = 0; r < n; ++r) want &= ~(std::uint64_t{1} << ((i + call + r) % 64));
      if (w[i] != want) {
        c.fail("control_and call " + std::to_string(call) + " word " + std::to_string(i));
        break;
      }
    }
    if (call % 50 == 0) c.expect_ok(comm->barrier(soon()), "barrier");
  }
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

// The transport table's choice over the job's base (as kolo::init() makes it).
int run_select(const check::CheckJob& job, const std::string& expect) {
  std::unique_ptr<Communicator> comm;
  const Status s = create_communicator(*job.factory, job.context, &comm);
  if (!s.ok()) {
    std::printf("FAIL select: %s\n", s.to_string().c_str());
    return 1;
  }
  const bool ok = expect == comm->name();
  std::printf("%s [rank %d] select: the transport table chose %s over %s (expected %s)\n",
              ok ? "PASS" : "FAIL", comm->rank(), comm->name(), job.transport.c_str(),
              expect.c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kolo::transport::shm_check

int main(int argc, char** argv) {
  using namespace kolo;
  using namespace kolo::transport;
  std::string mode = "check", arg;
  if (argc > 2)
    mode = argv[1], arg = argv[2];
  else if (argc > 1)
    mode = argv[1];
  check::CheckJob job;  // outlives the communicator: it holds the job's store
  Status s = check::open_check_job(&job);
  if (!s.ok()) {
    std::printf("FAIL setup: %s\n", s.to_string().c_str());
    return 1;
  }
  if (mode == "--select") return shm_check::run_select(job, arg);

  std::unique_ptr<Communicator> comm;
  s = job.factory->create(job.context, &comm);
  if (s.ok()) {
    s = wrap_in_shm(comm, shm_options(job.context.shm, job.context.fusion_threshold_bytes));
  }
  if (!s.ok()) {
    std::printf("FAIL setup: %s\n", s.to_string().c_str());
    return 1;
  }
  if (comm->rank() == 0) {
    std::printf("kolo_shm_check: %d ranks, shm over %s\n", comm->size(), job.transport.c_str());
  }
  if (mode == "--kill-rank") return shm_check::run_kill_test(comm.get(), std::stoi(arg));
  if (mode == "--bench") {
    shm_check::run_bench(comm.get());
    return 0;
  }
  check::Checker c(comm.get(), std::chrono::seconds(30));
  shm_check::check_allreduce(comm.get(), c);
  c.end_group(
      "shm allreduce: every dtype x op, edge and large sizes, copy / zero-copy / mixed paths");
  shm_check::check_others(comm.get(), c);
  c.end_group("shm broadcast, control_and, barrier, allgatherv");
  return c.failures() ? 1 : 0;
}
