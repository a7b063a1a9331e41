// Pieces shared by kolo_hier_check's files (hier_check.cc: correctness cases, selection
// and main; hier_check_modes.cc: the kill test and the benchmark). Test code only.
#pragma once

#include <chrono>

#include "check_harness.h"
#include "transport/communicator.h"

namespace kolo::transport::hier {
class HierarchicalCommunicator;
}

namespace kolo::transport::hier_check {

// Deadline of calls expected to succeed: generous, for 6 ranks oversubscribed on 2 cores.
inline Deadline soon() { return Clock::now() + std::chrono::seconds(60); }

// Rank `victim` SIGKILLs itself while every rank runs chunked allreduces with a 3 s
// deadline; the others, on every host, must fail with kPeerFailure naming it within 2 s
// (long before the deadline: host-mates see it die, other hosts get a failure notice),
// then fail at once on the next call. Prints "PASS [rank r] hier kill-test ..." or FAIL
// per survivor; returns the exit code.
int run_kill_test(hier::HierarchicalCommunicator* comm, int victim);

// Times 64 MiB float32 allreduces: hierarchical zero-copy (fusion buffer) and copy path,
// its two parts, and the flat base transport (mpi or gloo) alone.
void run_bench(hier::HierarchicalCommunicator* comm);

}  // namespace kolo::transport::hier_check
