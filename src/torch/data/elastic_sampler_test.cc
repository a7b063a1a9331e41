// ElasticSampler's arithmetic, with every rank of a job simulated in one process (no
// runtime): through shrinks and grows of the job within an epoch, at commits and at
// failures between commits, every index of the epoch is processed exactly once counting
// the work that was committed; the order is DistributedSampler's; shards stay within one
// sample of each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kolo/elastic.h"

namespace kolo {
namespace {

// One simulated job: the ranks' samplers, each rank's work since the last commit, and
// how often each index was in committed work.
struct Job {
  std::int64_t size;
  bool shuffle;
  std::uint64_t seed;
  std::vector<ElasticSampler> ranks;
  std::vector<std::vector<std::int64_t>> pending;  // per rank: trained on, not committed
  std::map<std::int64_t, int> committed;           // index -> times in committed work

  Job(std::int64_t size, int world, bool shuffle = true, std::uint64_t seed = 3)
      : size(size), shuffle(shuffle), seed(seed) {
    for (int r = 0; r < world; ++r) ranks.push_back(fresh(world, r));
    pending.resize(world);
  }
  ElasticSampler fresh(int world, int r) const {
    ElasticSampler s(size, shuffle, seed);
    s.reshard(world, r);
    return s;
  }
  int world() const { return static_cast<int>(ranks.size()); }

  // One training step on every rank that still has data: next(batch), train, record.
  // Returns false once no rank got a batch.
  bool step(std::size_t batch) {
    bool any = false;
    for (int r = 0; r < world(); ++r) {
      auto b = ranks[r].next(batch);
      if (!b) continue;
      any = true;
      for (std::size_t i : *b) pending[r].push_back(static_cast<std::int64_t>(i));
      ranks[r].record_batch(static_cast<std::int64_t>(b->size()));
    }
    return any;
  }
  void steps(int n, std::size_t batch) {
    for (int k = 0; k < n && step(batch); ++k) {
    }
  }
  // A commit: every rank saves the same counts (what the allgather would give).
  void commit() {
    std::vector<std::int64_t> counts;
    for (auto& s : ranks) counts.push_back(s.recorded());
    for (auto& s : ranks) s.save_progress(counts);
    for (auto& p : pending) {
      for (std::int64_t i : p) ++committed[i];
      p.clear();
    }
    for (auto& s : ranks) EXPECT_EQ(s.progress(), ranks[0].progress()) << "ranks disagree";
  }
  // The job re-forms with `survivors` (old ranks, in their new rank order) and `added`
  // new workers. failed: a worker died (survivors restore the last commit, uncommitted
  // work is lost); else the change came at a commit (HostsUpdatedInterrupt: commit first).
  // Then the state comes from new rank 0 (a survivor, as State::sync would choose).
  void reform(const std::vector<int>& survivors, int added, bool failed) {
    if (failed) {
      for (int r : survivors) ranks[r].restore_progress();
    } else {
      commit();
    }
    std::vector<ElasticSampler> next;
    for (int r : survivors) next.push_back(ranks[r]);
    const int world = static_cast<int>(survivors.size()) + added;
    for (int k = 0; k < added; ++k) next.push_back(fresh(world, static_cast<int>(next.size())));
    const std::string root = next[0].progress();
    for (int r = 0; r < world; ++r) next[r].load_progress(root, world, r);
    ranks = std::move(next);
    pending.assign(world, {});
    check_even();
  }
  // Runs the epoch to its end and commits.
  void finish(std::size_t batch) {
    while (step(batch)) {
    }
    commit();
  }
  void check_even() const {
    std::int64_t lo = INT64_MAX, hi = 0, total = 0;
    for (const auto& s : ranks) {
      lo = std::min(lo, s.shard_size());
      hi = std::max(hi, s.shard_size());
      total += s.shard_size();
    }
    EXPECT_LE(hi - lo, 1) << "shards of " << lo << " and " << hi << " samples";
    EXPECT_EQ(total, ranks[0].remaining()) << "the shards do not hold the epoch's rest";
  }
  void check_each_once() const {
    EXPECT_EQ(static_cast<std::int64_t>(committed.size()), size) << "indices skipped";
    for (const auto& [i, n] : committed) {
      EXPECT_GE(i, 0);
      EXPECT_LT(i, size);
      EXPECT_EQ(n, 1) << "index " << i << " processed " << n << " times";
    }
    for (const auto& s : ranks) EXPECT_EQ(s.remaining(), 0);
  }
};

TEST(ElasticSamplerTest, WithoutChangesItIsDistributedSamplersOrder) {
  for (int world : {1, 2, 3, 5}) {
    for (std::int64_t size : {0, 1, 7, 100}) {
      for (bool shuffle : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << world << " ranks, size " << size << ", shuffle " << shuffle);
        for (int r = 0; r < world; ++r) {
          Job job(size, world, shuffle, 11);
          DistributedSampler d(size, world, r, shuffle, 11, /*drop_last=*/false);
          d.set_epoch(4);
          job.ranks[r].set_epoch(4);
          EXPECT_EQ(job.ranks[r].indices(), d.indices()) << "rank " << r;
        }
        Job job(size, world, shuffle, 11);
        job.finish(3);
        job.check_each_once();
      }
    }
  }
}

TEST(ElasticSamplerTest, ShuffleIsDeterministicPerSeedAndEpoch) {
  auto order = [](std::uint64_t seed, std::int64_t epoch) {
    ElasticSampler s(50, true, seed);
    s.reshard(1, 0);
    s.set_epoch(epoch);
    return s.indices();
  };
  EXPECT_EQ(order(5, 2), order(5, 2));
  EXPECT_NE(order(5, 2), order(5, 3)) << "each epoch has its own order";
  EXPECT_NE(order(5, 2), order(6, 2)) << "each seed has its own order";
  std::vector<std::int64_t> sorted = order(5, 2);
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  ElasticSampler in_order(5, false);
  EXPECT_EQ(in_order.indices(), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

// Every index once per epoch for many (size, W -> W', batch, how far into the epoch)
// cases, each both ways: the change at a commit, or a worker's death between commits.
TEST(ElasticSamplerTest, EveryIndexOnceAcrossAShrinkAndAGrow) {
  int cases = 0;
  for (std::int64_t size : {1, 10, 57, 300}) {
    for (std::size_t batch : {1, 4, 16}) {
      for (int steps_before : {0, 1, 3, 7}) {
        for (bool failed : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "size " << size << ", batch " << batch << ", " << steps_before
                       << " steps, " << (failed ? "failure" : "at a commit"));
          // 3 -> 2 (rank 1 lost) -> 4 (two added), commits in between.
          Job job(size, 3);
          job.steps(steps_before, batch);
          job.commit();
          job.steps(2, batch);  // lost on failure
          job.reform({0, 2}, 0, failed);
          job.steps(steps_before + 1, batch);
          job.commit();
          job.steps(1, batch);
          job.reform({1, 0}, 2, failed);  // new order: old rank 1 is rank 0
          job.finish(batch);
          job.check_each_once();
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 96);
}

TEST(ElasticSamplerTest, ShrinkToOneAndGrowFromOne) {
  for (bool failed : {false, true}) {
    Job job(101, 4, true, 9);
    job.steps(5, 3);
    job.commit();
    job.steps(2, 3);
    job.reform({3}, 0, failed);  // 4 -> 1
    EXPECT_EQ(job.ranks[0].shard_size(), job.ranks[0].remaining());
    job.steps(4, 5);
    job.commit();
    job.reform({0}, 4, failed);  // 1 -> 5
    job.finish(2);
    job.check_each_once();
  }
}

TEST(ElasticSamplerTest, ReformWithNothingCommittedStartsTheEpochOver) {
  Job job(40, 2);
  job.steps(3, 4);  // not committed: a failure loses it
  job.reform({1}, 2, /*failed=*/true);
  EXPECT_EQ(job.ranks[0].remaining(), 40);
  job.finish(4);
  job.check_each_once();
}

TEST(ElasticSamplerTest, UnevenShardsDifferByOneAndCommonBatchesExistEverywhere) {
  for (std::int64_t size : {10, 11, 12, 13}) {
    for (std::int64_t batch : {1, 2, 3, 4, 5}) {
      Job job(size, 4);
      job.check_even();
      std::int64_t fewest = INT64_MAX;
      for (const auto& s : job.ranks) {
        fewest = std::min(fewest, (s.shard_size() + batch - 1) / batch);
        EXPECT_EQ(s.common_batches(batch), job.ranks[0].common_batches(batch));
      }
      EXPECT_EQ(job.ranks[0].common_batches(batch), fewest) << size << " / " << batch;
    }
  }
  Job job(10, 4);  // shards of 3, 3, 2, 2
  EXPECT_EQ(job.ranks[0].shard_size(), 3);
  EXPECT_EQ(job.ranks[3].shard_size(), 2);
  EXPECT_EQ(job.ranks[0].common_batches(2), 1);  // rank 0 has a second batch of 1, rank 3 not
}

TEST(ElasticSamplerTest, EpochsAndResumingOne) {
  Job job(30, 3);
  job.steps(2, 2);
  job.commit();
  for (auto& s : job.ranks) s.set_epoch(0);  // the current epoch: nothing changes
  EXPECT_EQ(job.ranks[0].remaining(), 30 - 12);
  EXPECT_EQ(job.ranks[0].recorded(), 4);
  job.finish(2);
  job.check_each_once();
  for (auto& s : job.ranks) s.set_epoch(1);
  EXPECT_EQ(job.ranks[0].remaining(), 30);
  EXPECT_EQ(job.ranks[0].epoch(), 1);
  // A failure early in epoch 1 goes back to the last commit, the end of epoch 0.
  job.steps(1, 2);
  for (auto& s : job.ranks) s.restore_progress();
  EXPECT_EQ(job.ranks[0].epoch(), 0);
  EXPECT_EQ(job.ranks[0].remaining(), 0);
}

TEST(ElasticSamplerTest, DataLoaderResetGoesOnFromTheFirstUnrecordedSample) {
  ElasticSampler s(20, true, 1);
  s.reshard(2, 1);
  const std::vector<std::int64_t> shard = s.indices();
  auto first = s.next(3);  // handed out ahead (a DataLoader prefetching)
  auto second = s.next(3);
  ASSERT_TRUE(first && second);
  s.record_batch(3);  // only the first was trained on
  s.reset();          // the DataLoader's next begin()
  auto again = s.next(3);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *second);
  EXPECT_EQ(static_cast<std::int64_t>((*again)[0]), shard[3]);
  ElasticSampler copy = s;  // copies share everything: what the DataLoader keeps
  copy.record_batch(3);
  EXPECT_EQ(s.recorded(), 6);
  s.next(100);
  EXPECT_FALSE(s.next(1).has_value());
}

// Inside libtorch's DataLoader (which keeps a copy of the sampler and asks for batches
// ahead with workers): a pass that stops halfway, a commit, a failure and a reshard over
// two ranks, then both ranks' loaders finish the epoch; the committed work covers it once.
TEST(ElasticSamplerTest, WorksInADataLoader) {
  for (std::size_t workers : {0, 2}) {
    SCOPED_TRACE(::testing::Message() << workers << " loader workers");
    const std::int64_t size = 45;
    auto loader_of = [&](ElasticSampler& s) {
      return torch::data::make_data_loader(
          torch::data::datasets::TensorDataset(torch::arange(size)), s,
          torch::data::DataLoaderOptions().batch_size(4).workers(workers));
    };
    std::map<std::int64_t, int> committed;
    ElasticSampler alone(size, true, 8);
    alone.reshard(1, 0);
    {
      auto loader = loader_of(alone);
      int batches = 0;
      for (auto& batch : *loader) {
        for (auto& example : batch) ++committed[example.data.item<std::int64_t>()];
        alone.record_batch(static_cast<std::int64_t>(batch.size()));  // on the kept copy
        if (++batches == 5) break;
      }
    }
    alone.save_progress({alone.recorded()});
    EXPECT_EQ(alone.remaining(), size - 20);
    alone.record_batch(4);  // trained on, then the job lost a worker: not committed
    alone.restore_progress();
    const std::string root = alone.progress();
    std::vector<ElasticSampler> ranks;  // not vector(2, s): copies share their state
    for (int r = 0; r < 2; ++r) ranks.emplace_back(size, true, 8);
    for (int r = 0; r < 2; ++r) ranks[r].load_progress(root, 2, r);
    std::vector<std::int64_t> counts;
    for (auto& s : ranks) {
      auto loader = loader_of(s);
      for (auto& batch : *loader) {
        for (auto& example : batch) ++committed[example.data.item<std::int64_t>()];
        s.record_batch(static_cast<std::int64_t>(batch.size()));
      }
      counts.push_back(s.recorded());
    }
    for (auto& s : ranks) s.save_progress(counts);
    EXPECT_EQ(ranks[0].remaining(), 0);
    EXPECT_EQ(static_cast<std::int64_t>(committed.size()), size);
    for (const auto& [i, n] : committed) EXPECT_EQ(n, 1) << "index " << i;
  }
}

TEST(ElasticSamplerTest, ArchiveKeepsTheProgress) {
  Job job(25, 1);
  job.steps(3, 4);
  job.commit();
  torch::serialize::OutputArchive out;
  job.ranks[0].save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  ElasticSampler loaded(25, true, 3);
  torch::serialize::InputArchive in;
  std::istringstream from(bytes.str());
  in.load_from(from);
  loaded.load(in);
  EXPECT_EQ(loaded.remaining(), 25 - 12);
  EXPECT_EQ(loaded.progress(), job.ranks[0].progress());
}

TEST(ElasticSamplerTest, ErrorsNameTheValues) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  ElasticSampler s(10, true, 0);
  s.reshard(3, 0);  // shard of 4
  EXPECT_NE(message([&] { s.record_batch(5); }).find("holds 4 samples"), std::string::npos);
  EXPECT_NE(message([&] { s.reshard(2, 2); }).find("rank must be in [0, 2), got 2"),
            std::string::npos);
  EXPECT_NE(message([&] {
              s.save_progress({0, 0});
            }).find("sharded over 3 ranks"),
            std::string::npos);
  EXPECT_NE(message([&] {
              s.save_progress({0, 9, 0});
            }).find("rank 1 recorded 9"),
            std::string::npos);
  ElasticSampler other(11, true, 0);
  EXPECT_NE(message([&] { s.load_progress(other.progress(), 3, 1); }).find("dataset size 11"),
            std::string::npos);
  EXPECT_NE(message([&] { s.load_progress("junk", 3, 1); }).find("not an ElasticSampler"),
            std::string::npos);
  EXPECT_NE(message([&] { s.reset(12); }).find("cannot change"), std::string::npos);
  EXPECT_NE(message([&] { s.next(0); }).find("batch_size must be >= 1"), std::string::npos);
  EXPECT_NE(message([] { ElasticSampler bad(-1); }).find("dataset_size must be >= 0, got -1"),
            std::string::npos);
  // A failed save changes nothing.
  s.record_batch(2);
  const std::string before = s.progress();
  EXPECT_NE(message([&] { s.save_progress({2, 5, 0}); }), "no error");
  EXPECT_EQ(s.progress(), before);
  EXPECT_EQ(s.remaining(), 10);
}

}  // namespace
}  // namespace kolo
