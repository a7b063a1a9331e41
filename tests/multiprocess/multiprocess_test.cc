// The runtime across real processes started by kolorun (over MPI): every collective
// with 2, 3 and 4 workers, the topology each worker sees, and a killed worker.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>

#include "run_kolorun.h"

namespace kolo {
namespace {

using launcher::testing::lines_of;
using launcher::testing::run_kolorun;

int count_lines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (const auto& l : lines_of(text)) n += l.find(needle) != std::string::npos;
  return n;
}

class Workers : public ::testing::TestWithParam<int> {};

TEST_P(Workers, EveryCollectiveMatchesTheReference) {
  const int n = GetParam();
  auto r = run_kolorun({"-np", std::to_string(n), KOLO_MP_WORKER, "collectives"}, 240);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(count_lines(r.out, "collectives OK"), n) << r.out << r.err;
}

TEST_P(Workers, TopologyMatchesTheLauncherEnvironment) {
  const int n = GetParam();
  auto r = run_kolorun({"-np", std::to_string(n), KOLO_MP_WORKER, "topology"}, 60);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  std::vector<bool> seen(n, false);
  for (const auto& line : lines_of(r.out)) {
    // [p] topology rank=.. size=.. local_rank=.. local_size=.. cross_rank=.. cross_size=..
    //     KOLO_RANK=.. KOLO_SIZE=.. KOLO_LOCAL_RANK=.. KOLO_LOCAL_SIZE=.. KOLO_CROSS_RANK=..
    //     KOLO_CROSS_SIZE=..
    int p, v[6], e[6];
    if (std::sscanf(
            line.c_str(),
            "[%d] topology rank=%d size=%d local_rank=%d local_size=%d cross_rank=%d cross_size=%d "
            "KOLO_RANK=%d KOLO_SIZE=%d KOLO_LOCAL_RANK=%d KOLO_LOCAL_SIZE=%d KOLO_CROSS_RANK=%d "
            "KOLO_CROSS_SIZE=%d",
            &p, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &e[0], &e[1], &e[2], &e[3], &e[4],
            &e[5]) != 13) {
      continue;
    }
    const int rank = v[0];
    ASSERT_LT(rank, n);
    seen[rank] = true;
    EXPECT_EQ(p, rank) << "output prefix names the rank: " << line;
    EXPECT_EQ(v[1], n) << line;
    for (int k = 0; k < 6; ++k) EXPECT_EQ(v[k], e[k]) << "runtime vs environment: " << line;
    EXPECT_EQ(v[2], rank) << "one host: local rank = rank: " << line;
  }
  for (int k = 0; k < n; ++k)
    EXPECT_TRUE(seen[k]) << "no topology line from rank " << k << "\n" << r.out;
}

INSTANTIATE_TEST_SUITE_P(Kolorun, Workers, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "workers"; });

// kill -9 of one worker while the others wait in an allreduce: the others fail within the
// peer timeout naming it, and kolorun exits non-zero naming it.
TEST(KilledWorker, OthersFailNamingItAndKolorunExitsNonZero) {
  auto r =
      run_kolorun({"-np", "3", KOLO_MP_WORKER, "die"}, 60, {{"KOLO_PEER_TIMEOUT_SECONDS", "2"}});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("kolorun: rank 2 (host"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by signal 9"), std::string::npos) << r.err;
  for (int survivor : {0, 1}) {
    const std::string prefix =
        "[" + std::to_string(survivor) + "] rank " + std::to_string(survivor) + ": peer failure";
    bool found = false;
    for (const auto& l : lines_of(r.err)) {
      if (l.find(prefix) != std::string::npos) {
        found = true;
        // Named either way the transport can know it: rank 0's control plane ("did not
        // take part"; "ranks 0, 2" when rank 0 has exited on its own failure meanwhile),
        // kolorun's exit notice in the store ("the launcher reports: rank 2 (host ...) was
        // killed by signal 9"), or its pid gone ("rank 2 is gone"). Which comes first is a
        // race; each names the rank.
        static const std::regex kAmongOthers(R"(ranks [0-9, ]*\b2\b[0-9, ]* did not take part)");
        const bool named = l.find("rank 2 did not take part") != std::string::npos ||
                           std::regex_search(l, kAmongOthers) ||
                           (l.find("rank 2 (host") != std::string::npos &&
                            l.find("killed by signal 9") != std::string::npos) ||
                           l.find("rank 2 is gone") != std::string::npos;
        EXPECT_TRUE(named) << l;
      }
    }
    EXPECT_TRUE(found) << "rank " << survivor << " did not report the dead peer:\n" << r.err;
  }
  EXPECT_LT(r.seconds, 15.0) << "kolorun took too long to end the job";
}

}  // namespace
}  // namespace kolo
