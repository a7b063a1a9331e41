// Request builder: turns one call of the public API (tensors and options) into the
// Request that negotiation carries, after checking what this rank alone can check
// (shapes, dtypes, outputs, process set).
//
// Pure: no runtime state, no other rank; errors come back as a Status naming the
// operation, the tensor and the value (the API layer, ops.h, throws them). `name` is the
// operation's name, already defaulted by the caller. Not for: checks that need the
// runtime (duplicate names, shut down: Runtime::submit) or other ranks (negotiation.h).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "core/message.h"
#include "kolo/kolo.h"

namespace kolo::core {

// `grouped`: grouped_allreduce (several tensors of one dtype in one request).
Status allreduce_request(const std::vector<TensorView>& inputs,
                         const std::vector<TensorView>& outputs, const AllreduceOptions& options,
                         bool grouped, const std::string& name, Request* out);
Status allgather_request(const TensorView& input, const AllgatherOptions& options,
                         const std::string& name, Request* out);
Status broadcast_request(const TensorView& tensor, const BroadcastOptions& options,
                         const std::string& name, Request* out);
Status alltoall_request(const TensorView& input, const AlltoallOptions& options,
                        const std::string& name, Request* out);
Status reducescatter_request(const TensorView& input, const ReducescatterOptions& options,
                             const std::string& name, Request* out);
// Barriers and joins have fixed names ("barrier", "join"): ranks that joined skip
// barriers, so per-call names would drift apart between ranks.
Status barrier_request(const BarrierOptions& options, Request* out);
Request join_request();

}  // namespace kolo::core
