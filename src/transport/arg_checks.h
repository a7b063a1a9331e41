// Argument checks that every transport makes alike, so that their messages are one.
// Not for: checks the runtime makes before a request reaches a transport (core/).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace kolo::transport {

// alltoallv's byte counts: one per rank in each direction. `where` names the call
// ("the gloo transport's alltoallv").
inline Status check_alltoallv_counts(const std::string& where, int ranks,
                                     const std::vector<std::size_t>& send_bytes,
                                     const std::vector<std::size_t>& recv_bytes) {
  const auto n = static_cast<std::size_t>(ranks);
  if (send_bytes.size() == n && recv_bytes.size() == n) return Status::OK();
  return InvalidArgument(where + ": send_bytes has " + std::to_string(send_bytes.size()) +
                         " entries and recv_bytes " + std::to_string(recv_bytes.size()) +
                         ", expected one per rank (" + std::to_string(n) + ")");
}

}  // namespace kolo::transport
