// kolo_gloo_check: end-to-end check of the Gloo transport across real processes, started
// by run_ranks.sh (later kolorun) with 2-4 ranks.
//
// Runs the transport-agnostic sweep of collective_checks.h (every collective, dtype, op,
// size 0..2^20 against references; the control plane; argument errors). With --kill-test
// one rank leaves (exits without shutting down, or with --sigkill SIGKILLs itself) and the
// others must get kPeerFailure naming it within a few seconds. Prints PASS/FAIL lines;
// exits non-zero on any failure.
//
//   run_ranks.sh 3 kolo_gloo_check
//   run_ranks.sh 3 kolo_gloo_check --kill-test [--kill-rank R] [--kill-op and|gather|allreduce]
//                                  [--sigkill]
//
// Not for: the runtime's semantics (tests/multiprocess).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "collective_checks.h"
#include "test_store.h"
#include "transport/gloo/gloo_communicator.h"

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
  testing::TestStore store;
  Status s = testing::open_test_store(&store);
  GlooOptions options;
  options.rank = testing::env_int("KOLO_RANK", 0);
  options.size = testing::env_int("KOLO_SIZE", 1);
  options.test_hosts = testing::env_int("KOLO_TEST_HOSTS", 0);
  if (const char* a = std::getenv("KOLO_HOST_ADDR")) options.host_addr = a;
  options.deadline = deadline_after(60);
  std::unique_ptr<Communicator> comm;
  if (s.ok()) s = create_gloo_communicator(options, store.store, &comm);
  if (!s.ok()) {
    std::printf("FAIL [rank %d] create_gloo_communicator: %s\n", options.rank,
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
