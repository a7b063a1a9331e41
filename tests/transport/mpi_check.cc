// kolo_mpi_check: end-to-end check of the MPI transport, run under mpirun with 2-4 ranks.
//
// Checks every collective for every dtype and every reduce op, at sizes from 0 to 2^20 + 3
// elements (collective_checks.cc: the large one for some pairs), against a reference
// computed here from deterministic per-rank inputs (small integers, so every result is
// exact even in int8 and bfloat16), the control plane, and argument errors. With
// --kill-test one rank exits without MPI_Finalize and the others must get kPeerFailure
// naming it within a few seconds. --bench measures latencies. Prints one PASS/FAIL line
// per group of cases; exits non-zero on any failure.
//
//   mpirun -np 3 kolo_mpi_check [--app-init]   (--app-init: the program initializes MPI)
//   mpirun --enable-recovery -np 3 kolo_mpi_check --kill-test [--kill-rank R]
//                                                 [--kill-op and|gather|allreduce]
//   mpirun -np 2 kolo_mpi_check --bench
//
// The kill test and the benchmark live in mpi_check_modes.cc. Not for: the runtime's
// semantics (averaging, fusion, negotiation), which are tested over the inproc transport;
// this program is MPI-specific and needs mpirun.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collective_checks.h"
#include "common/reduce.h"
#include "common/testing/elements.h"
#include "mpi_check.h"
#include "transport/communicator.h"
#include "transport/mpi/mpi_communicator.h"

namespace kolo::transport::mpi_check {
namespace {

int run(int argc, char** argv) {
  bool kill_test = false;
  bool bench = false;
  bool app_init = false;
  int victim = -1;
  std::string kill_op = "and";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--kill-test") {
      kill_test = true;
    } else if (arg == "--bench") {
      bench = true;
    } else if (arg == "--app-init") {
      app_init = true;
    } else if (arg == "--kill-rank" && i + 1 < argc) {
      victim = std::atoi(argv[++i]);
    } else if (arg == "--kill-op" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "and" || std::string(argv[i + 1]) == "gather" ||
                std::string(argv[i + 1]) == "allreduce")) {
      kill_op = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--app-init] [--bench] [--kill-test [--kill-rank R] "
                   "[--kill-op and|gather|allreduce]]\n",
                   argv[0]);
      return 2;
    }
  }
  // --app-init: the program owns MPI (FUNNELED, this thread), as an MPI application that
  // embeds kolo would; the communicator must use it and leave finalizing to us.
  if (app_init) {
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      std::printf("FAIL MPI_Init_thread\n");
      return 1;
    }
  }
  std::unique_ptr<Communicator> comm;
  const Status created = create_mpi_communicator(&comm);
  if (!created.ok()) {
    std::printf("FAIL create_mpi_communicator: %s\n", created.to_string().c_str());
    return 1;
  }
  const Topology& t = comm->topology();
  if (t.rank == 0) {
    std::printf("kolo_mpi_check: %d ranks, local_size %d, cross_size %d%s\n", t.size, t.local_size,
                t.cross_size, app_init ? ", MPI initialized by the program" : "");
  }
  if (kill_test) return run_kill_test(comm.get(), victim < 0 ? t.size - 1 : victim, kill_op);
  if (bench) {
    run_bench(comm.get());
    return 0;
  }
  int result = collective_check::run_checks(comm.get(), "kolo_mpi_check");
  const int rank = t.rank;
  comm.reset();
  if (app_init) {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized) {
      std::printf("FAIL [rank %d] the communicator finalized MPI that the program owns\n", rank);
      result = 1;
    } else {
      MPI_Finalize();
      if (rank == 0) std::printf("PASS MPI left to the program and finalized by it\n");
    }
  }
  return result;
}

}  // namespace
}  // namespace kolo::transport::mpi_check

int main(int argc, char** argv) { return kolo::transport::mpi_check::run(argc, argv); }
