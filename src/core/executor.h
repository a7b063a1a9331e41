// Executor: runs one negotiated response on this rank through the communicator.
//
// Implements tensor semantics on top of the byte-level collectives: copying input to
// output, prescale, averaging and postscale, zeros for joined ranks, output allocation
// for allgather/alltoall/reducescatter. Not for: deciding what runs (controller.h).
#pragma once

#include "core/message.h"
#include "core/runtime.h"
#include "transport/communicator.h"

namespace kolo::core {

// `entry` is null when this rank did not submit the operation because it has joined
// (allreduce and barrier only): it then takes part with zeros.
Status execute_response(transport::Communicator& comm, const Response& response, Entry* entry,
                        transport::Deadline deadline);

}  // namespace kolo::core
