// DistributedSampler: which dataset indices each rank reads in an epoch.
//
// Every rank computes the same order of [0, size) from seed + epoch (epoch_order in
// permutation.h) and takes every num_replicas-th element starting at its rank. As a
// libtorch Sampler (for torch::data's DataLoader) each reset() moves the shared epoch on,
// so that every epoch is reshuffled without a set_epoch() call. Loading the data is not
// this file's job.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kolo/torch.h"
#include "permutation.h"

namespace kolo {

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

void DistributedSampler::set_epoch(std::int64_t epoch) {
  shared_->epoch = epoch;
  shared_->chosen = true;
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  const std::int64_t n = shard_size();
  std::vector<std::int64_t> shard;
  shard.reserve(static_cast<std::size_t>(n));
  if (!shuffle_) {
    for (std::int64_t k = 0; k < n; ++k) shard.push_back(rank_ + k * replicas_);
    return shard;
  }
  const std::vector<std::int64_t> perm = data::epoch_order(size_, true, seed_, shared_->epoch);
  for (std::int64_t k = 0; k < n; ++k) shard.push_back(perm[rank_ + k * replicas_]);
  return shard;
}

void DistributedSampler::start_epoch() {
  current_ = indices();
  position_ = 0;
  primed_ = true;
}

void DistributedSampler::reset(c10::optional<std::size_t> new_size) {
  if (new_size) {
    if (*new_size > static_cast<std::size_t>(INT64_MAX)) {
      throw Error(ErrorCode::kInvalidArgument, "DistributedSampler::reset: new size " +
                                                   std::to_string(*new_size) + " is too large");
    }
    size_ = static_cast<std::int64_t>(*new_size);
  }
  // The DataLoader resets at every begin(): one reset, one epoch. An epoch chosen with
  // set_epoch() since the last reset is used as it is.
  Epoch& e = *shared_;
  if (!e.chosen && e.started) ++e.epoch;
  e.chosen = false;
  e.started = true;
  start_epoch();
}

c10::optional<std::vector<std::size_t>> DistributedSampler::next(std::size_t batch_size) {
  if (batch_size == 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "DistributedSampler::next: batch_size must be >= 1, got 0 (check the "
                "DataLoaderOptions' batch_size)");
  }
  if (!primed_) reset();
  if (position_ >= current_.size()) return c10::nullopt;
  const std::size_t n = std::min(batch_size, current_.size() - position_);
  std::vector<std::size_t> batch(n);
  for (std::size_t k = 0; k < n; ++k) batch[k] = static_cast<std::size_t>(current_[position_ + k]);
  position_ += n;
  return batch;
}

namespace {

// What identifies a sampler's sequence of indices; load() refuses another one's state.
constexpr const char* kIdentity[] = {"size", "replicas", "rank", "shuffle", "seed", "drop_last"};

}  // namespace

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  const std::int64_t identity[] = {
      size_, replicas_, rank_, shuffle_, static_cast<std::int64_t>(seed_), drop_last_};
  for (std::size_t i = 0; i < std::size(identity); ++i)
    archive.write(kIdentity[i], torch::tensor(identity[i], torch::kLong));
  archive.write("epoch", torch::tensor(shared_->epoch, torch::kLong));
  archive.write("epoch_chosen", torch::tensor(shared_->chosen ? 1 : 0, torch::kLong));
  archive.write("epoch_started", torch::tensor(shared_->started ? 1 : 0, torch::kLong));
  archive.write("position",
                torch::tensor(primed_ ? static_cast<std::int64_t>(position_) : -1, torch::kLong));
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  auto read = [&](const char* key) {
    torch::Tensor t;
    archive.read(key, t);
    return t.item<std::int64_t>();
  };
  const std::int64_t mine[] = {
      size_, replicas_, rank_, shuffle_, static_cast<std::int64_t>(seed_), drop_last_};
  for (std::size_t i = 0; i < std::size(mine); ++i) {
    const std::int64_t saved = read(kIdentity[i]);
    if (saved != mine[i]) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("DistributedSampler::load: the archive is from a sampler with ") +
                      kIdentity[i] + " " + std::to_string(saved) + ", this one has " +
                      std::to_string(mine[i]) +
                      "; load it into a sampler built with the same arguments");
    }
  }
  const std::int64_t position = read("position");
  Epoch& e = *shared_;
  e.epoch = read("epoch");
  e.chosen = read("epoch_chosen") != 0;
  e.started = read("epoch_started") != 0;  // then the next reset() starts the epoch after
  if (position < 0) {
    primed_ = false;
    return;
  }
  start_epoch();
  position_ = std::min(static_cast<std::size_t>(position), current_.size());
}

}  // namespace kolo
