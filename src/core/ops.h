// The operations of include/kolo/kolo.h on one Runtime: build the request (a default
// name when none is given), submit it, and throw kolo::Error for what fails on this rank
// alone (bad arguments, duplicate name, kolo not running).
//
// This is the API layer's side of the error policy: the core below returns Status, these
// functions throw. api.cc calls them on the default runtime; tests call them on their
// own runtimes. Not for: errors that involve other ranks (they fail the Handle).
#pragma once

#include <vector>

#include "core/runtime.h"
#include "kolo/kolo.h"

namespace kolo::core::ops {

// `grouped`: grouped_allreduce.
// (The views are taken by value: a call with temporaries moves them into the request.)
Handle allreduce(Runtime& runtime, std::vector<TensorView> inputs, std::vector<TensorView> outputs,
                 const AllreduceOptions& options, bool grouped);
Handle allgather(Runtime& runtime, const TensorView& input, const AllgatherOptions& options);
Handle broadcast(Runtime& runtime, const TensorView& tensor, const BroadcastOptions& options);
Handle alltoall(Runtime& runtime, const TensorView& input, const AlltoallOptions& options);
Handle reducescatter(Runtime& runtime, const TensorView& input,
                     const ReducescatterOptions& options);
Handle barrier(Runtime& runtime, const BarrierOptions& options);
Handle join(Runtime& runtime);
// Process sets (collective over every rank of the runtime; see kolo.h).
ProcessSet add_process_set(Runtime& runtime, std::vector<int> ranks);
void remove_process_set(Runtime& runtime, const ProcessSet& set);
ProcessSet global_process_set(Runtime& runtime);
ProcessSet process_set(Runtime& runtime, int id);

}  // namespace kolo::core::ops
