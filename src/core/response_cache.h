// ResponseCache: the steady-state fast path of negotiation.
//
// Training submits the same named operations every step. Once a name has been
// negotiated, every rank stores its response under the same bit (ranks insert in the
// same order, so the caches stay identical). Later, a rank whose request matches its
// cached one only sets that bit; one AND of the bit vectors across ranks tells every rank
// which cached operations all ranks are ready for, without sending request lists.
// Eviction is least-recently-used over the same sequence of events on every rank.
// Owned by the background thread; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/message.h"

namespace kolo::core {

class ResponseCache {
 public:
  explicit ResponseCache(int capacity) : capacity_(capacity) {}

  int capacity() const { return capacity_; }
  enum class Lookup { kMiss, kHit, kInvalid };
  // kHit: the cached request under this name equals `request` (bit in *bit).
  // kInvalid: the name is cached with a different request (bit in *bit); the caller
  // must make every rank erase it before the name is negotiated again.
  Lookup lookup(const Request& request, int* bit) const;

  // Ops whose responses may be cached: allreduce, broadcast, allgather, reducescatter.
  static bool cacheable_op(OpType op);
  // Whether a response may be cached: a successful response of a cacheable op with no
  // joined ranks.
  static bool cacheable(const Response& response);
  // Stores `response` with this rank's `request` under the name. Returns the bit of the
  // entry that was evicted to make room (-1 if none); its pending hits must be renegotiated.
  int put(const Response& response, const Request& request);
  const Response& response(int bit) const { return slots_[bit].response; }
  const Request& request(int bit) const { return slots_[bit].request; }
  // Marks a cached response as just used (same sequence on every rank).
  void touch(int bit) { slots_[bit].last_used = ++clock_; }
  void erase(int bit);
  bool contains(int bit) const { return bit < static_cast<int>(slots_.size()) && slots_[bit].used; }
  int size() const { return static_cast<int>(by_name_.size()); }

 private:
  struct Slot {
    bool used = false;
    Response response;
    Request request;
    std::uint64_t last_used = 0;
  };
  const int capacity_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int> by_name_;
  std::uint64_t clock_ = 0;
};

}  // namespace kolo::core
