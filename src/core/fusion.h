// Fusion planning: which responses of a cycle run together as one packed allreduce.
//
// A training step submits hundreds of gradients, most of them small; one collective per
// tensor would make each pay the transport's latency. Allreduces that are ready in the
// same cycle, have the same wire dtype (the dtype, or float16/bfloat16 for compressed
// float32/float64), device kind and wire reduction (average travels as a sum), are packed into one
// buffer of at most KOLO_FUSION_THRESHOLD bytes and reduced once. Scaling (prescale, average,
// postscale) differs per tensor and is applied while packing and unpacking, so it does not prevent
// fusion; so is compression.
//
// Pure: takes the response list every rank received and returns the same plan on every
// rank. Not for: moving bytes (executor.h).
#pragma once

#include <cstdint>
#include <vector>

#include "common/reduce.h"  // wire_op
#include "core/message.h"

namespace kolo::core {

// Indices into the cycle's response list, executed as one unit in this order. A group
// of one is executed on its own (any op); a larger group is a fused allreduce.
using FusionGroup = std::vector<std::size_t>;

// Bytes of an allreduce response's tensors (all of a grouped allreduce's shapes), and
// the bytes they take in the fusion buffer (in the wire dtype: compression halves them).
std::int64_t allreduce_bytes(const Response& r);
std::int64_t wire_bytes(const Response& r);

// Groups `responses` in order. Starting at the first response not yet placed, a group
// collects later allreduces compatible with it while their total stays within
// `threshold_bytes`, looking past incompatible allreduces (another dtype or reduction)
// but never past any other operation, so barriers and joins keep their place. A response
// larger than the threshold, an error response and every non-allreduce is a group of one.
// threshold_bytes == 0 disables fusion (every response alone).
std::vector<FusionGroup> plan_fusion(const std::vector<Response>& responses,
                                     std::int64_t threshold_bytes);

}  // namespace kolo::core
