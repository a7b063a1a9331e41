// DistributedSampler inside libtorch's DataLoader (torch::data::make_data_loader): every
// epoch each rank's loader yields its shard, the shards of all ranks partition the
// dataset, the order changes from epoch to epoch without set_epoch(), set_epoch() on the
// sampler the program keeps reaches the loader's copy, and the same seed gives the same
// orders. The ranks are simulated: one sampler and one loader per rank in this process
// (the sampler does not communicate; its ranks agree because they compute the same
// permutation).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kolo/torch.h"

namespace kolo {
namespace {

using Indices = std::vector<std::int64_t>;

// One rank: the sampler the program keeps, and a DataLoader over the dataset of indices
// [0, size) that holds its own copy of it.
struct Rank {
  Rank(std::int64_t size, int replicas, int rank, std::uint64_t seed, bool drop_last,
       std::size_t workers)
      : sampler(size, replicas, rank, /*shuffle=*/true, seed, drop_last),
        loader(torch::data::make_data_loader(
            torch::data::datasets::TensorDataset(torch::arange(size)), sampler,
            torch::data::DataLoaderOptions().batch_size(8).workers(workers))) {}

  // One epoch: the dataset indices in the order the loader yields them.
  Indices epoch() {
    Indices seen;
    for (auto& batch : *loader) {
      EXPECT_LE(batch.size(), 8u);
      for (auto& example : batch) seen.push_back(example.data.item<std::int64_t>());
    }
    return seen;
  }

  DistributedSampler sampler;
  std::unique_ptr<
      torch::data::StatelessDataLoader<torch::data::datasets::TensorDataset, DistributedSampler>>
      loader;
};

// `epochs` epochs of every rank: result[epoch][rank].
std::vector<std::vector<Indices>> run_epochs(std::int64_t size, int replicas, std::uint64_t seed,
                                             bool drop_last, std::size_t workers, int epochs) {
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < replicas; ++r)
    ranks.push_back(std::make_unique<Rank>(size, replicas, r, seed, drop_last, workers));
  std::vector<std::vector<Indices>> out(epochs);
  for (int e = 0; e < epochs; ++e) {
    for (auto& rank : ranks) {
      out[e].push_back(rank->epoch());
      // The program's own copy follows the loader's epoch.
      EXPECT_EQ(rank->sampler.epoch(), e);
      EXPECT_EQ(out[e].back(), rank->sampler.indices()) << "epoch " << e;
    }
  }
  return out;
}

TEST(SamplerLoaderTest, EveryEpochIsAPartitionInANewOrder) {
  const std::int64_t size = 103;  // not a multiple of 2 or 3
  for (int replicas : {1, 2, 3}) {
    for (bool drop_last : {true, false}) {
      for (std::size_t workers : {0, 2}) {
        SCOPED_TRACE(::testing::Message() << replicas << " ranks, drop_last " << drop_last << ", "
                                          << workers << " loader threads");
        const auto epochs = run_epochs(size, replicas, 11, drop_last, workers, 4);
        for (std::size_t e = 0; e < epochs.size(); ++e) {
          std::set<std::int64_t> seen;
          for (int r = 0; r < replicas; ++r) {
            const Indices& shard = epochs[e][r];
            const std::int64_t want = size / replicas + (!drop_last && r < size % replicas);
            EXPECT_EQ(static_cast<std::int64_t>(shard.size()), want) << "epoch " << e;
            for (std::int64_t i : shard) {
              EXPECT_TRUE(i >= 0 && i < size) << i;
              EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice in epoch " << e;
            }
            // The same as the index API at that epoch.
            DistributedSampler reference(size, replicas, r, true, 11, drop_last);
            reference.set_epoch(static_cast<std::int64_t>(e));
            EXPECT_EQ(shard, reference.indices()) << "rank " << r << " epoch " << e;
            if (e > 0) {
              EXPECT_NE(shard, epochs[e - 1][r]) << "rank " << r << " epoch " << e;
            }
          }
          EXPECT_EQ(static_cast<std::int64_t>(seen.size()),
                    drop_last ? size / replicas * replicas : size);
        }
      }
    }
  }
}

TEST(SamplerLoaderTest, SameSeedSameOrdersOtherSeedOtherOrders) {
  const auto a = run_epochs(50, 2, 5, true, 0, 3);
  const auto b = run_epochs(50, 2, 5, true, 2, 3);
  const auto c = run_epochs(50, 2, 6, true, 0, 3);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(SamplerLoaderTest, SetEpochOnTheKeptSamplerReachesTheLoader) {
  Rank rank(40, 2, 1, 3, true, 0);
  const Indices first = rank.epoch();
  EXPECT_EQ(rank.sampler.epoch(), 0);
  // PyTorch's habit: set_epoch(e) before every epoch. Each one is used as is.
  for (std::int64_t e : {7, 8, 2}) {
    rank.sampler.set_epoch(e);
    const Indices got = rank.epoch();
    DistributedSampler reference(40, 2, 1, true, 3);
    reference.set_epoch(e);
    EXPECT_EQ(got, reference.indices()) << "epoch " << e;
    EXPECT_EQ(rank.sampler.epoch(), e);
  }
  // Without set_epoch the loader goes on from the last epoch.
  rank.epoch();
  EXPECT_EQ(rank.sampler.epoch(), 3);
  // set_epoch(0) returns to the first order.
  rank.sampler.set_epoch(0);
  EXPECT_EQ(rank.epoch(), first);
}

TEST(SamplerLoaderTest, NextServesTheEpochInBatches) {
  DistributedSampler s(10, 1, 0, /*shuffle=*/false);
  std::vector<std::size_t> sizes;
  Indices seen;
  while (auto batch = s.next(4)) {
    sizes.push_back(batch->size());
    for (std::size_t i : *batch) seen.push_back(static_cast<std::int64_t>(i));
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{4, 4, 2}));
  EXPECT_EQ(seen, s.indices());
  EXPECT_FALSE(s.next(4).has_value()) << "exhausted until reset()";
  s.reset();
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_TRUE(s.next(4).has_value());
  EXPECT_THROW(s.next(0), Error);
}

TEST(SamplerLoaderTest, SaveAndLoadKeepEpochAndPosition) {
  DistributedSampler s(30, 3, 2, true, 9);
  s.reset();
  s.reset();  // epoch 1
  const auto first = s.next(4);
  torch::serialize::OutputArchive out;
  s.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  const auto rest = s.next(100);

  DistributedSampler t(30, 3, 2, true, 9);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  t.load(in);
  EXPECT_EQ(t.epoch(), 1);
  EXPECT_EQ(t.next(100), rest) << "continues where the saved sampler was";
  t.reset();
  EXPECT_EQ(t.epoch(), 2) << "the next reset starts the epoch after the saved one";

  DistributedSampler other(30, 3, 2, true, 10);  // another seed
  std::istringstream again(bytes.str());
  torch::serialize::InputArchive in2;
  in2.load_from(again);
  try {
    other.load(in2);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seed 9, this one has 10"), std::string::npos) << e.what();
  }
}

TEST(SamplerLoaderTest, CopiesShareTheEpoch) {
  DistributedSampler a(20, 2, 0, true, 1);
  DistributedSampler b = a;
  DistributedSampler c = std::move(b);  // a moved-from sampler still works and shares it
  c.set_epoch(4);
  EXPECT_EQ(a.epoch(), 4);
  EXPECT_EQ(b.epoch(), 4);
  EXPECT_EQ(a.indices(), c.indices());
}

}  // namespace
}  // namespace kolo
