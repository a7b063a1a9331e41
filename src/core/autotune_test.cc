// Autotuner: the search order, settling on the best score, and the CSV log (pure: the
// "measurements" are made up from the candidate under test).
#include "core/autotune.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <unistd.h>

namespace kolo::core {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

// A job whose throughput peaks at a 4 MiB buffer and a 1 ms cycle time.
double made_up_rate(const Tunables& t) {
  const double f = t.fusion_threshold_bytes == 4 * kMiB    ? 3.0
                   : t.fusion_threshold_bytes == 16 * kMiB ? 2.0
                                                           : 1.0;
  const double c = t.cycle_time_ms == 1.0 ? 1.5 : 1.0;
  return 1e9 * f * c;
}

// Feeds busy cycles of 1 ms at the current candidate's rate until the tuner settles;
// returns every change it asked for.
std::vector<Tunables> drive(Autotuner& tuner, double (*rate)(const Tunables&) = made_up_rate,
                            int max_cycles = 10000) {
  std::vector<Tunables> changes;
  double t = 0;
  for (int i = 0; i < max_cycles && !tuner.settled(); ++i) {
    const double bytes = rate(tuner.current()) * 1e-3;
    if (auto change = tuner.observe(bytes, t, t + 1e-3)) changes.push_back(*change);
    t += 1e-3;
  }
  return changes;
}

// The small grids of the tests below: one warm-up sample, two cycles per sample.
AutotuneOptions small_search(std::vector<std::int64_t> thresholds,
                             std::vector<double> cycle_times_ms) {
  AutotuneOptions o;
  o.warmup_samples = 1;
  o.cycles_per_sample = 2;
  o.fusion_thresholds = std::move(thresholds);
  o.cycle_times_ms = std::move(cycle_times_ms);
  return o;
}

TEST(AutotuneTest, SearchesThresholdsThenCycleTimesAndSettlesOnTheBest) {
  AutotuneOptions o;
  o.warmup_samples = 2;
  o.cycles_per_sample = 3;
  o.fusion_thresholds = {1 * kMiB, 4 * kMiB, 16 * kMiB};
  o.cycle_times_ms = {0.0, 1.0, 5.0};
  const Tunables start{
      .fusion_threshold_bytes = 16 * kMiB, .cycle_time_ms = 0.0, .hierarchical = false};
  Autotuner tuner(start, o);
  const auto changes = drive(tuner);
  ASSERT_TRUE(tuner.settled());
  const Tunables best{
      .fusion_threshold_bytes = 4 * kMiB, .cycle_time_ms = 1.0, .hierarchical = false};
  EXPECT_EQ(tuner.current(), best);
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.back(), best);
  // 2 warm-up samples, 3 thresholds, then 2 new cycle times at the best threshold.
  ASSERT_EQ(tuner.samples().size(), 7u);
  EXPECT_TRUE(tuner.samples()[0].warmup && tuner.samples()[1].warmup);
  EXPECT_EQ(tuner.samples()[2].tunables.fusion_threshold_bytes, 1 * kMiB);
  EXPECT_EQ(tuner.samples()[3].tunables.fusion_threshold_bytes, 4 * kMiB);
  EXPECT_EQ(tuner.samples()[4].tunables.fusion_threshold_bytes, 16 * kMiB);
  for (std::size_t i = 5; i < 7; ++i) {
    EXPECT_EQ(tuner.samples()[i].tunables.fusion_threshold_bytes, 4 * kMiB) << i;
    EXPECT_NE(tuner.samples()[i].tunables.cycle_time_ms, 0.0) << "measured twice";
  }
  for (const auto& s : tuner.samples()) {
    EXPECT_NEAR(s.score, made_up_rate(s.tunables), 1e-3 * s.score) << "score is bytes per second";
  }
  // After settling nothing changes any more.
  EXPECT_FALSE(tuner.observe(1e6, 100, 100.001).has_value());
}

// With a transport that offers both allreduce algorithms, the best candidate is also
// measured with the other one, and the tuner keeps whichever scored higher.
TEST(AutotuneTest, TriesTheOtherAllreduceAlgorithmWhenTheTransportOffersIt) {
  for (bool flat_is_faster : {true, false}) {
    AutotuneOptions o = small_search({1 * kMiB, 4 * kMiB}, {0.0, 1.0});
    o.tune_hierarchical = true;
    Autotuner tuner(
        Tunables{.fusion_threshold_bytes = 1 * kMiB, .cycle_time_ms = 0.0, .hierarchical = true},
        o);
    auto rate =
        flat_is_faster
            ? +[](const Tunables& t) { return made_up_rate(t) * (t.hierarchical ? 1.0 : 2.0); }
            : +[](const Tunables& t) { return made_up_rate(t) * (t.hierarchical ? 2.0 : 1.0); };
    drive(tuner, rate);
    ASSERT_TRUE(tuner.settled());
    // warm-up, 2 thresholds, 1 new cycle time, then the best with the flag flipped.
    ASSERT_EQ(tuner.samples().size(), 5u);
    const Tunables& flipped = tuner.samples().back().tunables;
    EXPECT_FALSE(flipped.hierarchical);
    EXPECT_EQ(flipped.fusion_threshold_bytes, 4 * kMiB);
    EXPECT_EQ(flipped.cycle_time_ms, 1.0);
    EXPECT_EQ(tuner.current(), (Tunables{.fusion_threshold_bytes = 4 * kMiB,
                                         .cycle_time_ms = 1.0,
                                         .hierarchical = !flat_is_faster}));
  }
  // Without the option the flag is never touched.
  Autotuner tuner(
      Tunables{.fusion_threshold_bytes = 1 * kMiB, .cycle_time_ms = 0.0, .hierarchical = true},
      small_search({1 * kMiB}, {0.0}));
  drive(tuner);
  for (const auto& sample : tuner.samples()) EXPECT_TRUE(sample.tunables.hierarchical);
}

TEST(AutotuneTest, DefaultGridsStayWithinTheConfiguredBuffer) {
  EXPECT_EQ(Autotuner::default_fusion_thresholds(64 * kMiB),
            (std::vector<std::int64_t>{1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB}));
  EXPECT_EQ(Autotuner::default_fusion_thresholds(8 * kMiB),
            (std::vector<std::int64_t>{1 * kMiB, 4 * kMiB, 8 * kMiB}));
  EXPECT_EQ(Autotuner::default_fusion_thresholds(0), (std::vector<std::int64_t>{0}));
  EXPECT_FALSE(Autotuner::default_cycle_times_ms().empty());
}

TEST(AutotuneTest, LogHasOneLinePerSampleAndTheSettledChoice) {
  const std::string path =
      ::testing::TempDir() + "kolo_autotune_" + std::to_string(::getpid()) + ".csv";
  {
    AutotuneOptions o = small_search({1 * kMiB, 4 * kMiB}, {0.0, 1.0});
    o.log_path = path;
    Autotuner tuner(
        Tunables{.fusion_threshold_bytes = 4 * kMiB, .cycle_time_ms = 0.0, .hierarchical = false},
        o);
    drive(tuner);
    ASSERT_TRUE(tuner.settled());
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 4u + 1u) << "header, 4 samples, settled";
  EXPECT_EQ(lines[0].rfind("sample,phase,fusion_threshold_bytes,cycle_time_ms", 0), 0u) << lines[0];
  EXPECT_NE(lines[1].find(",warmup,"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(",search,1048576,"), std::string::npos) << lines[2];
  EXPECT_NE(lines.back().find(",settled,4194304,1.000,"), std::string::npos) << lines.back();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kolo::core
