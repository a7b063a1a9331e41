// Entry: one submitted operation waiting to run on this rank: its request, its tensors
// and its handle's state.
//
// The runtime keeps entries by name until a negotiated response takes them; the
// executor reads their tensors and fills their results. Not for: what other ranks sent
// (that is in the Response).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "core/handle_state.h"
#include "core/message.h"
#include "kolo/kolo.h"

namespace kolo::core {

struct Entry {
  Request request;
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  std::shared_ptr<detail::HandleState> handle;
  // Device memory on the device path: where allgather, alltoall and reducescatter put
  // their result (kolo/types.h). Called on the background thread.
  OutputAllocator allocate_output;
  // Timeline only (background thread): end of the first cycle that carried the request.
  std::chrono::steady_clock::time_point first_cycle_end{};
};

}  // namespace kolo::core
