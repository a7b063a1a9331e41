// The transport-agnostic cases shared by the transport check programs (kolo_mpi_check,
// kolo_gloo_check): collective_checks.cc has the correctness sweep, kill_check.cc the
// kill test. Test code only.
#pragma once

#include <chrono>
#include <string>

#include "transport/communicator.h"

namespace kolo::transport::collective_check {

// The deadline of every call that is expected to succeed: generous, so that only a real
// hang fails it, even with 4 ranks oversubscribed on 2 cores.
inline Deadline soon() { return Clock::now() + std::chrono::seconds(30); }

// Every collective x dtype x op at the edge sizes, and past one segment for the pairs
// check::large_case() picks (collective_checks.cc), the control plane and argument errors; prints
// one PASS/FAIL line per group and "<program>: ALL PASS" on rank 0. Returns the exit code.
int run_checks(Communicator* comm, const char* program);

// What a kill test expects of the transport.
struct KillExpect {
  double min_seconds = 0;          // the survivors' failure takes at least this long
  double max_seconds = 5;          // and at most this long
  bool names_in_allreduce = true;  // the data plane names the rank that left
  bool victim_sigkill = false;     // the victim SIGKILLs itself (else it _exits)
};

// Rank `victim` leaves after a barrier; the others make one call (`op`: "and" for
// control_and, "gather" for control_gather then control_broadcast, "allreduce" for a
// 4 MiB allreduce) with a 2 s deadline and must get kPeerFailure as `expect` says, then
// fail at once on the next call. Prints "PASS [rank r] kill-test ..." or FAIL per
// surviving rank; returns the exit code.
int run_kill_test(Communicator* comm, int victim, const std::string& op, const KillExpect& expect);

}  // namespace kolo::transport::collective_check
