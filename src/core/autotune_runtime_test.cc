// Autotune through the runtime: ranks switch fusion threshold and cycle time at the same
// cycle, end with the same values, and results stay correct while the values change.
#include <fstream>

#include <unistd.h>

#include "core/ops.h"
#include "core/testing/ranks.h"

namespace kolo::core {
namespace {

using namespace testing;  // NOLINT: test helpers

TEST(AutotuneRuntimeTest, EveryRankUsesTheSameValuesAtEveryCycleAndEndsSettled) {
  constexpr int kRanks = 3;
  const std::string log_path =
      ::testing::TempDir() + "kolo_autotune_rt_" + std::to_string(::getpid()) + ".csv";
  Config config = test_config();
  config.autotune = true;
  config.autotune_warmup_samples = 1;
  config.autotune_cycles_per_sample = 2;
  config.autotune_log = log_path;
  config.fusion_threshold_bytes = 4 << 20;  // grid: 1 MiB, 4 MiB
  std::vector<std::vector<std::pair<std::uint64_t, Tunables>>> history(kRanks);
  std::vector<Tunables> final_values(kRanks);
  run_ranks(kRanks, config, [&](int rank, Runtime& rt) {
    for (int step = 0; step < 200; ++step) {
      std::vector<std::vector<float>> grads(6);
      std::vector<Handle> handles;
      for (std::size_t g = 0; g < grads.size(); ++g) {
        grads[g].assign(100 * (g + 1), static_cast<float>(rank + step + g));
        AllreduceOptions o;
        o.name = "grad." + std::to_string(g);
        o.op = ReduceOp::kSum;
        handles.push_back(ops::allreduce(rt, {view_of(grads[g], DataType::kFloat32)},
                                         {view_of(grads[g], DataType::kFloat32)}, o, false));
      }
      for (std::size_t g = 0; g < grads.size(); ++g) {
        handles[g].wait();
        const float want = static_cast<float>(kRanks * (step + g) + kRanks * (kRanks - 1) / 2);
        ASSERT_EQ(grads[g][0], want) << "step " << step << " grad " << g;
        ASSERT_EQ(grads[g].back(), want) << "step " << step << " grad " << g;
      }
    }
    ops::barrier(rt, {}).wait();
    history[rank] = rt.tunables_history();
    final_values[rank] = rt.tunables();
  });
  ASSERT_FALSE(history[0].empty()) << "autotune never changed anything in 200 steps";
  for (int r = 1; r < kRanks; ++r) {
    EXPECT_EQ(history[r], history[0])
        << "rank " << r << " switched at other cycles or to other values";
    EXPECT_EQ(final_values[r], final_values[0]);
  }
  // The log ends with the settled choice, which is what the ranks use now.
  std::ifstream in(log_path);
  std::string line, last;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.find(",search,") != std::string::npos || line.find(",warmup,") != std::string::npos)
      ++samples;
    last = line;
  }
  EXPECT_GE(samples, 1 + 2 + 4) << "warm-up, 2 thresholds, 4 other cycle times";
  ASSERT_NE(last.find(",settled,"), std::string::npos) << last;
  const std::string settled = "," + std::to_string(final_values[0].fusion_threshold_bytes) + ",";
  EXPECT_NE(last.find(settled), std::string::npos) << last << " vs threshold in use " << settled;
  std::remove(log_path.c_str());
}

}  // namespace
}  // namespace kolo::core
