// Pieces shared by kolo_shm_check's files (shm_check.cc: correctness cases, selection and
// main; shm_check_modes.cc: the kill test and the benchmark). Test code only.
#pragma once

#include <chrono>

#include "transport/communicator.h"

namespace kolo::transport::shm_check {

// Deadline of calls expected to succeed: generous, for 4 ranks oversubscribed on 2 cores.
inline Deadline soon() { return Clock::now() + std::chrono::seconds(30); }

// Rank `victim` SIGKILLs itself while every rank runs chunked allreduces; the others must
// fail with kPeerFailure naming it within a few seconds, then fail at once on the next
// call. Prints "PASS [rank r] shm kill-test ..." or FAIL per survivor; returns the exit code.
int run_kill_test(Communicator* comm, int victim);

// Times 64 MiB float32 allreduces at the communicator's rank count: shm zero-copy (the
// fusion buffer), shm copy path and the base transport alone (mpi or gloo).
void run_bench(Communicator* comm);

}  // namespace kolo::transport::shm_check
