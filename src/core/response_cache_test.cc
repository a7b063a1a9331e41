// ResponseCache (core/response_cache.h): lookups, what may be cached, deterministic bit
// assignment, LRU eviction, updates and erasure.
#include "core/response_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kolo::core {
namespace {

Request request(const std::string& name, Shape shape = {4}, int rank = 0) {
  Request r;
  r.rank = rank;
  r.name = name;
  r.shapes = {std::move(shape)};
  return r;
}

Response response(const std::string& name, Shape shape = {4}) {
  Response r;
  r.name = name;
  r.shapes = {std::move(shape)};
  return r;
}

// Stores name with shape {4}; returns the evicted bit.
int put(ResponseCache& cache, const std::string& name, Shape shape = {4}) {
  return cache.put(response(name, shape), request(name, shape));
}

int bit_of(const ResponseCache& cache, const std::string& name, Shape shape = {4}) {
  int bit = -1;
  EXPECT_EQ(cache.lookup(request(name, shape), &bit), ResponseCache::Lookup::kHit) << name;
  return bit;
}

TEST(ResponseCacheTest, MissHitAndInvalid) {
  ResponseCache cache(8);
  int bit = -1;
  EXPECT_EQ(cache.lookup(request("a"), &bit), ResponseCache::Lookup::kMiss);
  EXPECT_EQ(bit, -1);
  EXPECT_EQ(put(cache, "a"), -1);
  EXPECT_EQ(cache.size(), 1);

  EXPECT_EQ(cache.lookup(request("a"), &bit), ResponseCache::Lookup::kHit);
  EXPECT_EQ(bit, 0);
  EXPECT_TRUE(cache.contains(0));
  EXPECT_EQ(cache.response(0).name, "a");
  EXPECT_EQ(cache.request(0).shapes, (std::vector<Shape>{{4}}));
  // Another rank's identical request also hits: the rank is not part of the signature.
  EXPECT_EQ(cache.lookup(request("a", {4}, 3), &bit), ResponseCache::Lookup::kHit);

  bit = -1;
  EXPECT_EQ(cache.lookup(request("a", {5}), &bit), ResponseCache::Lookup::kInvalid);
  EXPECT_EQ(bit, 0);
  Request scaled = request("a");
  scaled.postscale = 2;
  EXPECT_EQ(cache.lookup(scaled, &bit), ResponseCache::Lookup::kInvalid);
  EXPECT_EQ(cache.lookup(request("b"), &bit), ResponseCache::Lookup::kMiss);
}

TEST(ResponseCacheTest, CacheableRules) {
  for (OpType op :
       {OpType::kAllreduce, OpType::kBroadcast, OpType::kAllgather, OpType::kReducescatter}) {
    Response r = response("x");
    r.op = op;
    EXPECT_TRUE(ResponseCache::cacheable(r)) << op_name(op);
    r.error_code = ErrorCode::kMismatch;
    r.error = "mismatch";
    EXPECT_FALSE(ResponseCache::cacheable(r)) << op_name(op) << " error";
  }
  for (OpType op : {OpType::kAlltoall, OpType::kBarrier, OpType::kJoin}) {
    Response r = response("x");
    r.op = op;
    EXPECT_FALSE(ResponseCache::cacheable(r)) << op_name(op);
  }
  Response joined = response("x");
  joined.joined_ranks = {1};
  EXPECT_FALSE(ResponseCache::cacheable(joined));
}

TEST(ResponseCacheTest, BitsAreDeterministic) {
  ResponseCache a(3), b(3);
  auto feed = [](ResponseCache& c) {
    std::vector<int> evicted;
    for (const char* n : {"w1", "w2", "w3"}) evicted.push_back(put(c, n));
    c.touch(bit_of(c, "w1"));
    evicted.push_back(put(c, "w4"));
    c.erase(bit_of(c, "w3"));
    evicted.push_back(put(c, "w5"));
    c.touch(bit_of(c, "w4"));
    evicted.push_back(put(c, "w6"));
    return evicted;
  };
  EXPECT_EQ(feed(a), feed(b));
  for (const char* n : {"w1", "w4", "w5", "w6"}) {
    int ba = -1, bb = -1;
    const auto la = a.lookup(request(n), &ba);
    EXPECT_EQ(la, b.lookup(request(n), &bb)) << n;
    if (la == ResponseCache::Lookup::kHit) {
      EXPECT_EQ(ba, bb) << n;
    }
  }
  EXPECT_EQ(a.size(), b.size());
}

TEST(ResponseCacheTest, BitsFillLowestFreeSlot) {
  ResponseCache cache(4);
  put(cache, "a");
  put(cache, "b");
  put(cache, "c");
  EXPECT_EQ(bit_of(cache, "a"), 0);
  EXPECT_EQ(bit_of(cache, "b"), 1);
  EXPECT_EQ(bit_of(cache, "c"), 2);
  cache.erase(1);
  EXPECT_EQ(put(cache, "d"), -1);
  EXPECT_EQ(bit_of(cache, "d"), 1);
  EXPECT_EQ(put(cache, "e"), -1);
  EXPECT_EQ(bit_of(cache, "e"), 3);
}

TEST(ResponseCacheTest, EvictsLeastRecentlyUsed) {
  ResponseCache cache(3);
  put(cache, "a");  // bit 0
  put(cache, "b");  // bit 1
  put(cache, "c");  // bit 2
  // Without touches the oldest insertion goes first.
  EXPECT_EQ(put(cache, "d"), 0);
  EXPECT_EQ(bit_of(cache, "d"), 0);
  int bit;
  EXPECT_EQ(cache.lookup(request("a"), &bit), ResponseCache::Lookup::kMiss);
  EXPECT_EQ(cache.size(), 3);

  // Touching b makes c the least recently used.
  cache.touch(bit_of(cache, "b"));
  EXPECT_EQ(put(cache, "e"), 2);
  EXPECT_EQ(cache.lookup(request("c"), &bit), ResponseCache::Lookup::kMiss);
  EXPECT_EQ(bit_of(cache, "e"), 2);
  // Now d (bit 0) is oldest, then b, then e.
  EXPECT_EQ(put(cache, "f"), 0);
  EXPECT_EQ(put(cache, "g"), 1);
  EXPECT_EQ(cache.size(), 3);
  for (const char* n : {"e", "f", "g"}) EXPECT_GE(bit_of(cache, n), 0);
}

TEST(ResponseCacheTest, PutOfExistingNameReusesItsBit) {
  ResponseCache cache(2);
  put(cache, "a");
  put(cache, "b");
  EXPECT_EQ(put(cache, "a", {9}), -1);  // new signature replaces the old one in place
  EXPECT_EQ(cache.size(), 2);
  EXPECT_EQ(bit_of(cache, "a", {9}), 0);
  EXPECT_EQ(cache.response(0).shapes, (std::vector<Shape>{{9}}));
  int bit;
  EXPECT_EQ(cache.lookup(request("a", {4}), &bit), ResponseCache::Lookup::kInvalid);
  // The update counted as a use: b is now the least recently used.
  EXPECT_EQ(put(cache, "c"), 1);
  EXPECT_EQ(bit_of(cache, "a", {9}), 0);
}

TEST(ResponseCacheTest, Erase) {
  ResponseCache cache(4);
  put(cache, "a");
  put(cache, "b");
  cache.erase(0);
  EXPECT_FALSE(cache.contains(0));
  EXPECT_TRUE(cache.contains(1));
  EXPECT_EQ(cache.size(), 1);
  int bit;
  EXPECT_EQ(cache.lookup(request("a"), &bit), ResponseCache::Lookup::kMiss);
  cache.erase(0);   // already erased: no effect
  cache.erase(17);  // never used: no effect
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(bit_of(cache, "b"), 1);
  EXPECT_FALSE(cache.contains(17));
}

TEST(ResponseCacheTest, CapacityZeroNeverStores) {
  ResponseCache cache(0);
  EXPECT_EQ(cache.capacity(), 0);
  for (const char* n : {"a", "b", "a"}) EXPECT_EQ(put(cache, n), -1);
  EXPECT_EQ(cache.size(), 0);
  EXPECT_FALSE(cache.contains(0));
  int bit = -1;
  EXPECT_EQ(cache.lookup(request("a"), &bit), ResponseCache::Lookup::kMiss);
}

TEST(ResponseCacheTest, CapacityOneKeepsOnlyTheLatest) {
  ResponseCache cache(1);
  EXPECT_EQ(put(cache, "a"), -1);
  EXPECT_EQ(put(cache, "b"), 0);
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(bit_of(cache, "b"), 0);
  int bit;
  EXPECT_EQ(cache.lookup(request("a"), &bit), ResponseCache::Lookup::kMiss);
}

}  // namespace
}  // namespace kolo::core
