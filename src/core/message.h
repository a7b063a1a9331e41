// Request and Response: what ranks tell the coordinator, and what it tells them back.
//
// A Request describes one named operation submitted on one rank (no data, only its
// metadata). The coordinator turns the requests of every rank for a name into one
// Response (the operation every rank runs, with what each rank needs to know about the
// others, such as allgather's first dimensions) or into an error response. Both have a
// compact, versioned binary encoding for the control plane. Each message lists its fields
// once (`fields`); encoding, decoding and comparison are derived from that list, so a new
// field is either everywhere or nowhere. Not for: tensor data or handles.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
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
  // Process-set registration (kolo::add_process_set / remove_process_set), negotiated on
  // the global set like any operation so that every rank agrees on it or gets its error.
  kAddProcessSet,
  kRemoveProcessSet,
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
  std::int32_t root = 0;  // broadcast; remove_process_set: the id of the set to remove
  double prescale = 1.0;
  double postscale = 1.0;
  DataType wire_dtype = DataType::kFloat32;  // allreduce: dtype on the wire (compression)
  std::vector<Shape> shapes;                 // one per tensor; grouped allreduce has several
  // alltoall: rows sent to each rank (empty = equal parts); add_process_set: the new
  // set's ranks, ascending.
  std::vector<std::int64_t> splits;

  // Every field but `rank`, in wire order: what must agree for the response cache to
  // treat two requests as the same.
  template <typename Self>
  static auto signature_fields(Self& r) {
    return std::tie(r.process_set, r.name, r.op, r.dtype, r.device, r.reduce_op, r.root, r.prescale,
                    r.postscale, r.wire_dtype, r.shapes, r.splits);
  }
  // Every field, in wire order.
  template <typename Self>
  static auto fields(Self& r) {
    return std::tuple_cat(std::tie(r.rank), signature_fields(r));
  }

  // Equal in everything but `rank`: the response cache's notion of "same request".
  bool same_signature(const Request& other) const {
    return signature_fields(*this) == signature_fields(other);
  }
  bool operator==(const Request& other) const { return fields(*this) == fields(other); }
};

struct Response {
  OpType op = OpType::kAllreduce;
  std::string name;
  ErrorCode error_code = ErrorCode::kOk;  // not kOk: every rank's handle fails with error
  std::string error;
  DataType dtype = DataType::kFloat32;
  DeviceKind device = DeviceKind::kCPU;
  ReduceOp reduce_op = ReduceOp::kSum;
  std::int32_t root = 0;  // broadcast; remove_process_set: the id of the set to remove
  double prescale = 1.0;
  double postscale = 1.0;
  DataType wire_dtype = DataType::kFloat32;  // allreduce: dtype on the wire (compression)
  std::vector<Shape> shapes;             // allreduce/broadcast/reducescatter (same on all ranks)
  std::vector<std::int64_t> first_dims;  // allgather: dim 0 of each rank
  // alltoall: size x size, row r = rank r's splits; add_process_set: the set's ranks
  std::vector<std::int64_t> splits;
  // allreduce/barrier: joined ranks, which take part with the op's identity
  std::vector<std::int32_t> joined_ranks;
  std::int32_t last_joined = -1;  // join

  // Every field, in wire order.
  template <typename Self>
  static auto fields(Self& r) {
    return std::tie(r.op, r.name, r.error_code, r.error, r.dtype, r.device, r.reduce_op, r.root,
                    r.prescale, r.postscale, r.wire_dtype, r.shapes, r.first_dims, r.splits,
                    r.joined_ranks, r.last_joined);
  }
  bool is_error() const { return error_code != ErrorCode::kOk; }
  bool operator==(const Response& other) const { return fields(*this) == fields(other); }
};

// Runtime parameters that every rank must use alike, changed at run time by autotune
// (autotune.h). The coordinator sends new values in a ResponseList; every rank applies
// them after executing that list, so all ranks switch between the same two cycles.
struct Tunables {
  std::int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  bool hierarchical = false;

  template <typename Self>
  static auto fields(Self& t) {
    return std::tie(t.fusion_threshold_bytes, t.cycle_time_ms, t.hierarchical);
  }
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

// Version of the encoding below. Every message starts with a magic byte and this
// version; a message of another version (another kolo build in the same job) is refused
// with an error that says so. Raise it with any change of a message's fields.
constexpr std::uint8_t kWireVersion = 1;

std::string encode_requests(const std::vector<Request>& requests);
Status decode_requests(const std::string& bytes, std::vector<Request>* out);
std::string encode_response_list(const ResponseList& list);
Status decode_response_list(const std::string& bytes, ResponseList* out);

}  // namespace kolo::core
