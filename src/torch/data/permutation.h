// The order of a dataset's indices in one epoch, shared by kolo's samplers
// (DistributedSampler, ElasticSampler) so that both walk the same permutation for the same
// seed and epoch. Not for sharding: each sampler splits the order its own way.
#pragma once

#include <cstdint>
#include <vector>

namespace kolo::data {

// [0, size) in order, or (shuffle) a Fisher-Yates permutation over std::mt19937_64 seeded
// with seed + epoch, with an unbiased bounded draw of our own: not std::shuffle, whose use
// of uniform_int_distribution is implementation-defined, so ranks built with different
// standard libraries still agree.
std::vector<std::int64_t> epoch_order(std::int64_t size, bool shuffle, std::uint64_t seed,
                                      std::int64_t epoch);

}  // namespace kolo::data
