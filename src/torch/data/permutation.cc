// epoch_order (permutation.h): the per-epoch order of a dataset's indices.
#include "permutation.h"

#include <numeric>
#include <random>
#include <utility>

namespace kolo::data {
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

std::vector<std::int64_t> epoch_order(std::int64_t size, bool shuffle, std::uint64_t seed,
                                      std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (!shuffle) return order;
  std::mt19937_64 rng(seed + static_cast<std::uint64_t>(epoch));
  for (std::int64_t i = size - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(draw_below(rng, static_cast<std::uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace kolo::data
