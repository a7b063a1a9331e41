// Argument checks that every device (host/, cuda/) makes alike, so that their messages
// are one. Each returns OK or kInvalidArgument naming `where` (the device or communicator).
// Not for: the checks of the CPU transports (transport/arg_checks.h, whose alltoallv check
// the devices' collectives use too).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/convert.h"
#include "common/status.h"
#include "kolo/types.h"

namespace kolo::device {

inline Status check_convert(const std::string& where, DataType from, DataType to) {
  if (can_convert(from, to)) return Status::OK();
  return InvalidArgument(where + ": cannot convert " + dtype_name(from) + " to " + dtype_name(to) +
                         " (the same dtype, or float32/float64 to and from float16/bfloat16)");
}

inline Status check_reduce_op(const std::string& where, ReduceOp op) {
  if (op != ReduceOp::kAverage) return Status::OK();
  return InvalidArgument(where + ": reduce takes no kAverage (sum, then convert with a divisor)");
}

inline Status check_root(const std::string& where, int root, int size) {
  if (root >= 0 && root < size) return Status::OK();
  return InvalidArgument(where + ": broadcast root " + std::to_string(root) + " is not a rank of " +
                         std::to_string(size));
}

inline Status check_allgatherv_counts(const std::string& where, int size,
                                      const std::vector<std::size_t>& recv_bytes) {
  if (recv_bytes.size() == static_cast<std::size_t>(size)) return Status::OK();
  return InvalidArgument(where + ": allgatherv has " + std::to_string(recv_bytes.size()) +
                         " counts, expected one per rank (" + std::to_string(size) + ")");
}

}  // namespace kolo::device
