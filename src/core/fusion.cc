#include "core/fusion.h"

namespace kolo::core {
namespace {

bool fusable(const Response& r) { return r.op == OpType::kAllreduce && !r.is_error(); }

// The buffer holds wire dtypes: a float32 tensor compressed to float16 fuses with float16
// tensors.
bool compatible(const Response& a, const Response& b) {
  return a.wire_dtype == b.wire_dtype && a.device == b.device &&
         wire_op(a.reduce_op) == wire_op(b.reduce_op);
}

}  // namespace

std::int64_t allreduce_bytes(const Response& r) {
  std::int64_t total = 0;
  for (const auto& shape : r.shapes) {
    std::int64_t n = static_cast<std::int64_t>(dtype_size(r.dtype));
    for (auto d : shape) n *= d;
    total += n;
  }
  return total;
}

std::int64_t wire_bytes(const Response& r) {
  return allreduce_bytes(r) / static_cast<std::int64_t>(dtype_size(r.dtype)) *
         static_cast<std::int64_t>(dtype_size(r.wire_dtype));
}

std::vector<FusionGroup> plan_fusion(const std::vector<Response>& responses,
                                     std::int64_t threshold_bytes) {
  if (responses.size() == 1) return {FusionGroup{0}};  // a lone response (most cycles)
  std::vector<FusionGroup> groups;
  std::vector<bool> placed(responses.size(), false);
  for (std::size_t i = 0; i < responses.size(); ++i) {
    if (placed[i]) continue;
    placed[i] = true;
    groups.push_back({i});
    const Response& first = responses[i];
    if (threshold_bytes <= 0 || !fusable(first)) continue;
    std::int64_t bytes = wire_bytes(first);
    if (bytes > threshold_bytes) continue;
    for (std::size_t j = i + 1; j < responses.size(); ++j) {
      const Response& next = responses[j];
      if (next.is_error()) continue;  // runs nothing on the wire
      if (!fusable(next)) break;      // barriers, joins and other ops keep their order
      if (placed[j] || !compatible(first, next)) continue;
      const std::int64_t b = wire_bytes(next);
      if (bytes + b > threshold_bytes) continue;
      bytes += b;
      placed[j] = true;
      groups.back().push_back(j);
    }
  }
  return groups;
}

}  // namespace kolo::core
