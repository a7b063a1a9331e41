// kolo_gloo_check: end-to-end check of the Gloo transport across real processes, started
// by kolorun's own launcher with 2-4 ranks (the job's store is kolorun's; check_job.h).
//
// Runs the transport-agnostic sweep of collective_checks.h (every collective, dtype and op
// at sizes 0..2^20 + 3 against references; the control plane; argument errors). With --kill-test
// one rank leaves (exits without shutting down, or with --sigkill SIGKILLs itself) and the
// others must get kPeerFailure naming it within a few seconds. Prints PASS/FAIL lines;
// exits non-zero on any failure.
//
//   kolorun -np 3 kolo_gloo_check
//   kolorun -np 3 kolo_gloo_check --kill-test [--kill-rank R] [--kill-op and|gather|allreduce]
//                                 [--sigkill]
//
// Not for: the runtime's semantics (tests/multiprocess).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "check_job.h"
#include "collective_checks.h"

namespace kolo::transport {
namespace {

int run(int argc, char** argv) {
  bool kill_test = false;
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
    } else {
      std::fprintf(stderr,
                   "usage: %s [--kill-test [--kill-rank R] [--kill-op and|gather|allreduce] "
                   "[--sigkill]]\n",
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
  if (kill_test) {
    return collective_check::run_kill_test(comm.get(), victim < 0 ? t.size - 1 : victim, kill_op,
                                           expect);
  }
  return collective_check::run_checks(comm.get(), "kolo_gloo_check");
}

}  // namespace
}  // namespace kolo::transport

int main(int argc, char** argv) { return kolo::transport::run(argc, argv); }
