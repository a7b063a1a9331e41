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
// The global set's barrier is "barrier"; set k's is "barrier.set<k>".
Status barrier_request(const BarrierOptions& options, Request* out);
Request join_request();
// Process-set registration, negotiated on the global set under `name` (the same on every
// rank: Runtime::next_set_change_name). add sorts `ranks` (as Horovod does); negotiation
// checks that they are valid and the same on every rank.
Request add_process_set_request(std::vector<int> ranks, const std::string& name);
Request remove_process_set_request(int id, const std::string& name);

}  // namespace kolo::core
