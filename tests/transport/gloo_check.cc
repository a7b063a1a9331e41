// kolo_gloo_check: end-to-end check of the Gloo transport across real processes, started
// by kolorun's own launcher with 2-4 ranks (the job's store is kolorun's; check_job.h).
//
// Runs the transport-agnostic sweep of collective_checks.h (every collective, dtype and
// op at sizes 0..2^20 + 3 against references; the control plane; argument errors). With
// --kill-test one rank leaves (exits without shutting down, or with --sigkill SIGKILLs
// itself) and the others must get kPeerFailure naming it within a few seconds. Prints
// PASS/FAIL lines; exits non-zero on any failure. --bench times 64 MiB allreduce and
// reducescatter.
//
//   kolorun -np 3 kolo_gloo_check [--bench]
//   kolorun -np 3 kolo_gloo_check --kill-test [--kill-rank R] [--kill-op and|gather|allreduce]
//                                 [--sigkill]
//
// Not for: the runtime's semantics (tests/multiprocess).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "check_job.h"
#include "collective_checks.h"

namespace kolo::transport {
namespace {

using std::chrono::duration;

// --bench: medians of 10 timed calls (after 2 warm-ups) on 64 MiB of float32: allreduce,
// reducescatter (equal blocks: the ring), and the allreduce-then-slice it replaced.
void run_bench(Communicator* comm) {
  const std::size_t count = std::size_t{16} << 20, block = count / comm->size();
  std::vector<float> data(count, 1.0f), out(block), scratch(count);
  std::vector<std::size_t> counts(comm->size(), block);
  auto time_it = [&](const char* what, auto call) {
    std::vector<double> t;
    for (int i = 0; i < 12; ++i) {
      if (!comm->barrier(collective_check::soon()).ok()) return;
      const auto start = Clock::now();
      const Status s = call();
      if (!s.ok()) {
        std::printf("FAIL [rank %d] %s: %s\n", comm->rank(), what, s.to_string().c_str());
        return;
      }
      if (i >= 2) t.push_back(duration<double>(Clock::now() - start).count());
    }
    std::sort(t.begin(), t.end());
    if (comm->rank() == 0) {
      std::printf("%-44s median %8.1f ms  best %8.1f ms  (%d ranks)\n", what, t[t.size() / 2] * 1e3,
                  t[0] * 1e3, comm->size());
    }
  };
  auto reducescatter = [&] {
    return comm->reducescatter(data.data(), out.data(), counts, DataType::kFloat32, ReduceOp::kSum,
                               collective_check::soon());
  };
  auto allreduce = [&] {
    return comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum,
                           collective_check::soon());
  };
  time_it("allreduce 64 MiB f32", allreduce);
  time_it("reducescatter 64 MiB f32 (ring)", reducescatter);
  time_it("allreduce 64 MiB f32, then this rank's block", [&] {
    std::copy(data.begin(), data.end(), scratch.begin());
    const Status s = comm->allreduce(scratch.data(), count, DataType::kFloat32, ReduceOp::kSum,
                                     collective_check::soon());
    std::copy_n(scratch.data() + comm->rank() * block, block, out.data());
    return s;
  });
}

int run(int argc, char** argv) {
  bool kill_test = false, bench = false;
  int victim = -1;
  std::string kill_op = "and";
  collective_check::KillExpect expect;  // gloo sees a peer's sockets close: fast, named
  expect.min_seconds = 0;
  expect.max_seconds = 4.0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--kill-test") {
      kill_test = true;
    } else if (arg == "--kill-rank" && i + 1 < argc) {
      victim = std::atoi(argv[++i]);
    } else if (arg == "--kill-op" && i + 1 < argc) {
      kill_op = argv[++i];
    } else if (arg == "--sigkill") {
      expect.victim_sigkill = true;
    } else if (arg == "--bench") {
      bench = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--bench | --kill-test [--kill-rank R] "
                   "[--kill-op and|gather|allreduce] [--sigkill]]\n",
                   argv[0]);
      return 2;
    }
  }
  check::CheckJob job;
  Status s = check::open_check_job(&job);
  const TransportFactory* gloo = find_transport("gloo");  // whatever KOLO_TRANSPORT says
  if (s.ok() && gloo == nullptr) s = Internal("this build has no gloo transport");
  std::unique_ptr<Communicator> comm;
  if (s.ok()) s = gloo->create(job.context, &comm);  // the base alone, no shm layer
  if (!s.ok()) {
    std::printf("FAIL [rank %d] creating the gloo communicator: %s\n", job.launch.rank,
                s.to_string().c_str());
    return 1;
  }
  const Topology& t = comm->topology();
  if (t.rank == 0) {
    std::printf("kolo_gloo_check: %d ranks, local_size %d, cross_size %d\n", t.size, t.local_size,
                t.cross_size);
  }
  if (bench) {
    run_bench(comm.get());
    return 0;
  }
  if (kill_test) {
    return collective_check::run_kill_test(comm.get(), victim < 0 ? t.size - 1 : victim, kill_op,
                                           expect);
  }
  return collective_check::run_checks(comm.get(), "kolo_gloo_check");
}

}  // namespace
}  // namespace kolo::transport

int main(int argc, char** argv) { return kolo::transport::run(argc, argv); }
