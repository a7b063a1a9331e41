// Pieces shared by kolo_mpi_check's files (mpi_check.cc: the correctness cases and main;
// mpi_check_modes.cc: the --kill-test and --bench modes). Not a library: test code only.
#pragma once

#include <chrono>
#include <string>

#include "transport/communicator.h"

namespace kolo::transport::mpi_check {

// The deadline of every call that is expected to succeed: generous, so that only a real
// hang fails it, even with 4 ranks oversubscribed on 2 cores.
inline Deadline soon() { return Clock::now() + std::chrono::seconds(30); }

// Rank `victim` exits without MPI_Finalize; the others make one call (`op`: "and" for
// control_and, "gather" for control_gather then control_broadcast, "allreduce" for a 4 MiB
// allreduce) with a 2 s deadline and must get kPeerFailure in 2-5 s, naming the victim
// (except for allreduce: MPI cannot tell), and an immediate failure on the next call.
// Prints PASS/FAIL per surviving rank; returns the exit code.
int run_kill_test(Communicator* comm, int victim, const std::string& op);

// Latency (median/p90/p99 over 10000 calls) of the control calls and a small allreduce,
// bandwidth of a 64 MiB allreduce, each next to plain MPI for reference, and the CPU a rank
// burns while it waits for a late peer.
void run_bench(Communicator* comm);

}  // namespace kolo::transport::mpi_check
