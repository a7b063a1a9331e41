// DistributedSampler: which dataset indices each rank reads in an epoch.
//
// Every rank computes the same permutation of [0, size) from seed + epoch and takes
// every num_replicas-th element starting at its rank. The shuffle is a Fisher-Yates over
// std::mt19937_64 with our own unbiased bounded draw (not std::shuffle, whose use of
// uniform_int_distribution is implementation-defined), so ranks built with different
// standard libraries still agree. Loading the data is not this file's job.
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kolo/torch.h"

namespace kolo {
namespace {

// Uniform in [0, bound) without modulo bias: reject draws from the incomplete last block.
std::uint64_t draw_below(std::mt19937_64& rng, std::uint64_t bound) {
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  std::uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % bound;
}

}  // namespace

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, std::uint64_t seed, bool drop_last)
    : size_(dataset_size),
      replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas < 1) {
    throw Error(ErrorCode::kInvalidArgument, "DistributedSampler: num_replicas must be >= 1, got " +
                                                 std::to_string(num_replicas));
  }
  if (rank < 0 || rank >= num_replicas) {
    throw Error(ErrorCode::kInvalidArgument, "DistributedSampler: rank must be in [0, " +
                                                 std::to_string(num_replicas) + "), got " +
                                                 std::to_string(rank));
  }
  if (dataset_size < 0) {
    throw Error(ErrorCode::kInvalidArgument, "DistributedSampler: dataset_size must be >= 0, got " +
                                                 std::to_string(dataset_size));
  }
}

std::int64_t DistributedSampler::shard_size() const {
  const std::int64_t base = size_ / replicas_;
  if (drop_last_) return base;
  return base + (rank_ < size_ % replicas_ ? 1 : 0);
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  const std::int64_t n = shard_size();
  std::vector<std::int64_t> shard;
  shard.reserve(static_cast<std::size_t>(n));
  if (!shuffle_) {
    for (std::int64_t k = 0; k < n; ++k) shard.push_back(rank_ + k * replicas_);
    return shard;
  }
  std::vector<std::int64_t> perm(static_cast<std::size_t>(size_));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  std::mt19937_64 rng(seed_ + static_cast<std::uint64_t>(epoch_));
  for (std::int64_t i = size_ - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(draw_below(rng, static_cast<std::uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  for (std::int64_t k = 0; k < n; ++k) shard.push_back(perm[rank_ + k * replicas_]);
  return shard;
}

}  // namespace kolo
