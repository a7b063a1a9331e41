// The kill test shared by the transport check programs (collective_checks.h): one rank
// leaves (exits without shutting down, or SIGKILLs itself) and the others, in one call with
// a 2 s deadline, must get kPeerFailure naming it in the expected time, then an immediate
// failure on the next call. Test code only.
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "collective_checks.h"

namespace kolo::transport::collective_check {
namespace {

using std::chrono::duration;
using std::chrono::seconds;

// Whether the message names `rank` ("rank 2", "ranks 1, 2", not rank 21) after its
// "mpi <op> on rank R of N: " prefix, which names the reporting rank.
bool names_rank(const std::string& message, int rank) {
  const std::size_t prefix = message.find(": ");
  if (prefix == std::string::npos) return false;
  const std::string text = message.substr(prefix);
  const std::string r = std::to_string(rank);
  for (std::size_t at = text.find(r); at != std::string::npos; at = text.find(r, at + 1)) {
    const bool starts = text[at - 1] == ' ';
    const bool ends = at + r.size() == text.size() || !std::isdigit(text[at + r.size()]);
    const bool after_rank = text.rfind("rank", at) != std::string::npos;
    if (starts && ends && after_rank) return true;
  }
  return false;
}

}  // namespace

int run_kill_test(Communicator* comm, int victim, const std::string& op, const KillExpect& expect) {
  const int rank = comm->rank();
  std::vector<std::uint64_t> words = {~std::uint64_t{0}};
  Status s = comm->control_and(words, soon());
  if (s.ok()) s = comm->barrier(soon());
  if (!s.ok()) {
    std::printf("FAIL [rank %d] kill-test setup: %s\n", rank, s.to_string().c_str());
    return 1;
  }
  if (rank == victim) {
    std::printf("kill-test: rank %d %s\n", rank,
                expect.victim_sigkill ? "kills itself (SIGKILL)" : "exits without shutting down");
    std::fflush(stdout);
    if (expect.victim_sigkill) kill(getpid(), SIGKILL);
    _exit(0);
  }
  const auto start = Clock::now();
  const Deadline deadline = start + seconds(2);
  std::vector<float> data;
  if (op == "gather") {
    std::vector<std::string> all;
    s = comm->control_gather("request", &all, deadline);
    std::string response;
    if (s.ok()) s = comm->control_broadcast(&response, deadline);
  } else if (op == "allreduce") {
    data.assign(std::size_t{1} << 20, 1.0f);
    s = comm->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum, deadline);
  } else {
    s = comm->control_and(words, deadline);
  }
  const double elapsed = duration<double>(Clock::now() - start).count();
  const auto again_start = Clock::now();
  const Status again = comm->control_and(words, Clock::now() + seconds(2));
  const double again_elapsed = duration<double>(Clock::now() - again_start).count();

  std::string problem;
  if (s.code() != ErrorCode::kPeerFailure)
    problem = "expected peer failure";
  else if ((op != "allreduce" || expect.names_in_allreduce) && !names_rank(s.message(), victim))
    problem = "the message does not name rank " + std::to_string(victim);
  else if (elapsed < expect.min_seconds || elapsed > expect.max_seconds)
    problem = "took " + std::to_string(elapsed) + " s, expected " +
              std::to_string(expect.min_seconds) + "-" + std::to_string(expect.max_seconds) + " s";
  else if (again.code() != ErrorCode::kPeerFailure || again_elapsed > 0.01)
    problem = "the next call did not fail at once";
  std::printf("%s [rank %d] kill-test %s (rank %d gone): %.2f s: %s%s%s\n",
              problem.empty() ? "PASS" : "FAIL", rank, op.c_str(), victim, elapsed,
              s.to_string().c_str(), problem.empty() ? "" : " -- ", problem.c_str());
  std::fflush(stdout);
  return problem.empty() ? 0 : 1;
}

}  // namespace kolo::transport::collective_check
