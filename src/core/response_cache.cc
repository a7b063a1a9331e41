#include "core/response_cache.h"

namespace kolo::core {

ResponseCache::Lookup ResponseCache::lookup(const Request& request, int* bit) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return Lookup::kMiss;
  *bit = it->second;
  return slots_[it->second].request.same_signature(request) ? Lookup::kHit : Lookup::kInvalid;
}

bool ResponseCache::cacheable_op(OpType op) {
  return op == OpType::kAllreduce || op == OpType::kBroadcast || op == OpType::kAllgather ||
         op == OpType::kReducescatter;
}

bool ResponseCache::cacheable(const Response& r) {
  return !r.is_error() && r.joined_ranks.empty() && cacheable_op(r.op);
}

int ResponseCache::put(const Response& response, const Request& request) {
  if (capacity_ == 0) return -1;
  int evicted = -1;
  int bit;
  if (auto it = by_name_.find(response.name); it != by_name_.end()) {
    bit = it->second;
  } else if (static_cast<int>(by_name_.size()) < capacity_) {
    bit = 0;
    while (bit < static_cast<int>(slots_.size()) && slots_[bit].used) ++bit;
    if (bit == static_cast<int>(slots_.size())) slots_.emplace_back();
  } else {
    bit = 0;
    for (int i = 1; i < static_cast<int>(slots_.size()); ++i) {
      if (slots_[i].last_used < slots_[bit].last_used) bit = i;
    }
    erase(bit);
    evicted = bit;
  }
  Slot& s = slots_[bit];
  s.used = true;
  s.response = response;
  s.request = request;
  s.last_used = ++clock_;
  by_name_[response.name] = bit;
  return evicted;
}

void ResponseCache::erase(int bit) {
  if (!contains(bit)) return;
  by_name_.erase(slots_[bit].response.name);
  slots_[bit] = Slot{};
}

}  // namespace kolo::core
