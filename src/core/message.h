// Request and Response: what ranks tell the coordinator, and what it tells them back.
//
// A Request describes one named operation submitted on one rank (no data, only its
// metadata). The coordinator turns the requests of every rank for a name into one
// Response (the operation every rank runs, with what each rank needs to know about the
// others, such as allgather's first dimensions) or into an error response. Both have a
// compact binary encoding for the control plane. Not for: tensor data or handles.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kolo/types.h"

namespace kolo::core {

enum class OpType : std::uint8_t {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kBarrier,
  kJoin,
};
const char* op_name(OpType op);

using Shape = std::vector<std::int64_t>;

struct Request {
  std::int32_t rank = 0;
  std::int32_t process_set = 0;  // negotiated among the ranks of this set only
  std::string name;
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  DeviceKind device = DeviceKind::kCPU;
  ReduceOp reduce_op = ReduceOp::kSum;
  std::int32_t root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  DataType wire_dtype = DataType::kFloat32;  // allreduce: dtype on the wire (compression)
  std::vector<Shape> shapes;                 // one per tensor; grouped allreduce has several
  std::vector<std::int64_t> splits;          // alltoall; empty = equal parts

  // Equal in everything but `rank`: the response cache's notion of "same request".
  bool same_signature(const Request& other) const;
};

struct Response {
  OpType op = OpType::kAllreduce;
  std::string name;
  ErrorCode error_code = ErrorCode::kOk;  // not kOk: every rank's handle fails with error
  std::string error;
  DataType dtype = DataType::kFloat32;
  DeviceKind device = DeviceKind::kCPU;
  ReduceOp reduce_op = ReduceOp::kSum;
  std::int32_t root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  DataType wire_dtype = DataType::kFloat32;  // allreduce: dtype on the wire (compression)
  std::vector<Shape> shapes;               // allreduce/broadcast/reducescatter (same on all ranks)
  std::vector<std::int64_t> first_dims;    // allgather: dim 0 of each rank
  std::vector<std::int64_t> splits;        // alltoall: size x size, row r = rank r's splits
  std::vector<std::int32_t> joined_ranks;  // allreduce/barrier: ranks taking part with zeros
  std::int32_t last_joined = -1;           // join

  bool is_error() const { return error_code != ErrorCode::kOk; }
};

// Runtime parameters that every rank must use alike, changed at run time by autotune
// (autotune.h). The coordinator sends new values in a ResponseList; every rank applies
// them after executing that list, so all ranks switch between the same two cycles.
struct Tunables {
  std::int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  bool hierarchical = false;

  bool operator==(const Tunables&) const = default;
};

// What the coordinator broadcasts after a negotiation round.
struct ResponseList {
  std::vector<Response> responses;
  ErrorCode abort_code = ErrorCode::kOk;  // not kOk: fail everything and stop the runtime
  std::string abort_message;
  bool has_tunables = false;  // true: every rank switches to `tunables` after this list
  Tunables tunables;
};

std::string encode_requests(const std::vector<Request>& requests);
Status decode_requests(const std::string& bytes, std::vector<Request>* out);
std::string encode_response_list(const ResponseList& list);
Status decode_response_list(const std::string& bytes, ResponseList* out);

}  // namespace kolo::core
