#include "core/negotiation.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "common/format.h"
#include "common/shape.h"

namespace kolo::core {

std::int64_t reducescatter_rows(std::int64_t rows, int size, int rank) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

namespace {

// "float32 on ranks 0, 2; float64 on rank 1": each distinct value with its ranks.
template <typename F>
std::string by_value(const std::vector<Request>& reqs, F value) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& r : reqs) {
    const std::string v = value(r);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == v; });
    if (it == groups.end()) {
      groups.push_back({v, {r.rank}});
    } else {
      it->second.push_back(r.rank);
    }
  }
  std::string s;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    s += (i ? "; " : "") + groups[i].first + " on " + ranks_string(groups[i].second);
  }
  return s;
}

template <typename F>
bool all_same(const std::vector<Request>& reqs, F value) {
  for (const auto& r : reqs) {
    if (!(value(r) == value(reqs.front()))) return false;
  }
  return true;
}

std::string shapes_string(const std::vector<Shape>& shapes) {
  if (shapes.size() == 1) return shape_string(shapes[0]);
  std::string s = "(";
  for (std::size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shape_string(shapes[i]);
  return s + ")";
}

Response error(const Request& first, ErrorCode code, std::string message) {
  Response r;
  r.op = first.op;
  r.name = first.name;
  r.error_code = code;
  r.error = std::move(message);
  return r;
}

Shape tail(const Shape& s) { return s.empty() ? Shape{} : Shape(s.begin() + 1, s.end()); }

// Checks shared by several ops; returns a message or "".
std::string check_same_shapes(const std::vector<Request>& reqs, const std::string& what) {
  if (all_same(reqs, [](const Request& r) { return r.shapes; })) return "";
  std::string m = "Mismatched shapes for " + what + ": " +
                  by_value(reqs, [](const Request& r) { return shapes_string(r.shapes); });
  bool same_count = all_same(reqs, [](const Request& r) {
    std::vector<std::int64_t> counts;
    for (const auto& s : r.shapes) counts.push_back(shape_numel(s));
    return counts;
  });
  // Saturated counts (past INT64_MAX) say nothing about equality.
  for (const auto& r : reqs) {
    for (const auto& s : r.shapes) {
      if (shape_numel(s) == std::numeric_limits<std::int64_t>::max()) same_count = false;
    }
  }
  if (same_count) m += " (the same number of elements but different dimensions)";
  return m + ". Every rank must pass a tensor of the same shape.";
}

std::string check_zero_d(const std::vector<Request>& reqs, const std::string& what) {
  std::vector<int> bad;
  for (const auto& r : reqs) {
    if (r.shapes.empty() || r.shapes[0].empty()) bad.push_back(r.rank);
  }
  if (bad.empty()) return "";
  return what + " got a 0-d (scalar) tensor on " + ranks_string(bad) +
         "; it splits or concatenates along dimension 0, so pass a tensor with at least one "
         "dimension (e.g. reshape to [1]).";
}

std::string check_same_tails(const std::vector<Request>& reqs, const std::string& what) {
  if (all_same(reqs, [](const Request& r) { return tail(r.shapes[0]); })) return "";
  return "Mismatched shapes for " + what + ": " +
         by_value(reqs, [](const Request& r) { return shape_string(r.shapes[0]); }) +
         ". Dimension 0 may differ between ranks, the other dimensions must agree.";
}

// Fills resp.splits (size x size) or returns a message.
std::string alltoall_splits(const std::vector<Request>& reqs, int size, const std::string& what,
                            Response* resp) {
  resp->splits.assign(static_cast<std::size_t>(size) * size, 0);
  for (const auto& r : reqs) {
    const std::int64_t rows = r.shapes[0][0];
    std::vector<std::int64_t> splits = r.splits;
    if (splits.empty()) {
      if (rows % size != 0) {
        return what + " on rank " + std::to_string(r.rank) + ": dimension 0 (" +
               std::to_string(rows) + ") does not divide evenly among " + std::to_string(size) +
               " ranks; pass splits.";
      }
      splits.assign(size, rows / size);
    }
    if (static_cast<int>(splits.size()) != size) {
      return what + " on rank " + std::to_string(r.rank) + ": splits has " +
             std::to_string(splits.size()) + " entries but there are " + std::to_string(size) +
             " ranks; pass one entry per rank.";
    }
    std::int64_t sum = 0;
    bool past_rows = false;
    for (int j = 0; j < size; ++j) {
      if (splits[j] < 0) {
        return what + " on rank " + std::to_string(r.rank) + ": splits[" + std::to_string(j) +
               "] = " + std::to_string(splits[j]) + " is negative.";
      }
      // The sum of large splits could wrap around: once it overflows, it is past dim 0.
      if (!past_rows && __builtin_add_overflow(sum, splits[j], &sum)) past_rows = true;
    }
    if (past_rows || sum > rows) {
      const std::string total =
          past_rows ? "more than " + std::to_string(rows) : std::to_string(sum);
      return what + " on rank " + std::to_string(r.rank) + ": splits sum to " + total +
             " rows but dimension 0 has only " + std::to_string(rows) + ".";
    }
    std::copy(splits.begin(), splits.end(), resp->splits.begin() + std::size_t(r.rank) * size);
  }
  return "";
}

// add_process_set / remove_process_set: every rank must name the same set; a new set's
// ranks must be valid ranks of the job, ascending (the API sorts them), without repeats.
Response process_set_response(const std::vector<Request>& reqs, int size, const std::string& what) {
  const Request& first = reqs.front();
  const std::string advice =
      " Every rank must make the same kolo::add_process_set / remove_process_set calls, "
      "with the same arguments, in the same order.";
  Response resp;
  resp.op = first.op;
  resp.name = first.name;
  if (first.op == OpType::kRemoveProcessSet) {
    if (!all_same(reqs, [](const Request& r) { return r.root; })) {
      return error(
          first, ErrorCode::kMismatch,
          "Mismatched process sets for " + what + ": " +
              by_value(reqs, [](const Request& r) { return "set " + std::to_string(r.root); }) +
              "." + advice);
    }
    if (first.root == 0) {
      return error(first, ErrorCode::kInvalidArgument,
                   what + ": the global process set (id 0) cannot be removed.");
    }
    resp.root = first.root;
    return resp;
  }
  if (!all_same(reqs, [](const Request& r) { return r.splits; })) {
    return error(first, ErrorCode::kMismatch,
                 "Mismatched ranks for " + what + ": " +
                     by_value(reqs, [](const Request& r) { return shape_string(r.splits); }) + "." +
                     advice);
  }
  const std::vector<std::int64_t>& ranks = first.splits;
  const std::string set = "process set " + shape_string(ranks);
  if (ranks.empty()) {
    return error(first, ErrorCode::kInvalidArgument,
                 what + ": a process set needs at least one rank.");
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size) {
      return error(first, ErrorCode::kInvalidArgument,
                   what + ": " + set + " names rank " + std::to_string(ranks[i]) +
                       ", but the job has " + std::to_string(size) + " ranks (0 to " +
                       std::to_string(size - 1) + ").");
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return error(
          first, ErrorCode::kInvalidArgument,
          what + ": " + set +
              (ranks[i] == ranks[i - 1] ? " names rank " + std::to_string(ranks[i]) + " twice."
                                        : " is not in ascending order (a corrupt message)."));
    }
  }
  resp.splits = ranks;
  return resp;
}

}  // namespace

Response make_response(const std::vector<Request>& reqs,
                       const std::vector<std::int32_t>& all_joined, int size) {
  const Request& first = reqs.front();
  // Only joined ranks that did not submit this name take part with zeros (a rank may
  // submit and then join in the same cycle).
  std::vector<std::int32_t> joined;
  for (auto j : all_joined) {
    if (std::none_of(reqs.begin(), reqs.end(), [j](const Request& r) { return r.rank == j; })) {
      joined.push_back(j);
    }
  }
  const std::string what = std::string(op_name(first.op)) + " '" + first.name + "'";
  // Every rank checks its own dimensions before submitting (Runtime::enqueue), so a
  // negative one comes from a corrupt or foreign message; refuse it before any sizes are
  // computed from it.
  for (const auto& r : reqs) {
    for (const auto& s : r.shapes) {
      for (auto d : s) {
        if (d < 0) {
          return error(first, ErrorCode::kInvalidArgument,
                       what + ": rank " + std::to_string(r.rank) + " sent the shape " +
                           shape_string(s) + " with a negative dimension (a corrupt message)");
        }
      }
    }
  }

  if (!all_same(reqs, [](const Request& r) { return r.op; })) {
    return error(first, ErrorCode::kMismatch,
                 "Mismatched operations for tensor '" + first.name + "': " +
                     by_value(reqs, [](const Request& r) { return std::string(op_name(r.op)); }) +
                     ". Every rank must submit the same operation under one name.");
  }
  if (!all_same(reqs, [](const Request& r) { return r.dtype; })) {
    return error(first, ErrorCode::kMismatch,
                 "Mismatched data types for " + what + ": " + by_value(reqs, [](const Request& r) {
                   return std::string(dtype_name(r.dtype));
                 }) + ".");
  }
  if (!all_same(reqs, [](const Request& r) { return r.device; })) {
    return error(first, ErrorCode::kMismatch,
                 "Mismatched devices for " + what + ": " + by_value(reqs, [](const Request& r) {
                   return std::string(device_kind_name(r.device));
                 }) + ". Either every rank passes a CPU tensor or every rank a GPU tensor.");
  }

  const bool set_op = first.op == OpType::kAddProcessSet || first.op == OpType::kRemoveProcessSet;
  const bool needs_all = first.op == OpType::kAllgather || first.op == OpType::kBroadcast ||
                         first.op == OpType::kAlltoall || first.op == OpType::kReducescatter ||
                         set_op;
  if (needs_all && !joined.empty()) {
    std::vector<int> j(joined.begin(), joined.end());
    std::sort(j.begin(), j.end());
    return error(first, ErrorCode::kInvalidArgument,
                 what + " cannot run while " + ranks_string(j) +
                     (j.size() == 1 ? " has" : " have") +
                     " joined: only allreduce and barrier take joined ranks into account.");
  }
  if (set_op) return process_set_response(reqs, size, what);

  Response resp;
  resp.op = first.op;
  resp.name = first.name;
  resp.dtype = first.dtype;
  resp.device = first.device;
  resp.reduce_op = first.reduce_op;
  resp.root = first.root;
  resp.prescale = first.prescale;
  resp.postscale = first.postscale;
  resp.wire_dtype = first.wire_dtype;

  std::string msg;
  switch (first.op) {
    case OpType::kAllreduce:
    case OpType::kReducescatter: {
      if (!all_same(reqs, [](const Request& r) { return r.reduce_op; })) {
        msg = "Mismatched reduce ops for " + what + ": " +
              by_value(reqs,
                       [](const Request& r) { return std::string(reduce_op_name(r.reduce_op)); }) +
              ".";
      } else if (!all_same(reqs, [](const Request& r) { return r.prescale; })) {
        msg = "Mismatched prescale factors for " + what + ": " +
              by_value(reqs, [](const Request& r) { return number_string(r.prescale); }) + ".";
      } else if (!all_same(reqs, [](const Request& r) { return r.postscale; })) {
        msg = "Mismatched postscale factors for " + what + ": " +
              by_value(reqs, [](const Request& r) { return number_string(r.postscale); }) + ".";
      } else if (!all_same(reqs, [](const Request& r) { return r.wire_dtype; })) {
        msg =
            "Mismatched compression for " + what + " (wire dtype): " +
            by_value(reqs, [](const Request& r) { return std::string(dtype_name(r.wire_dtype)); }) +
            ". Every rank must pass the same AllreduceOptions::compression.";
      } else if (first.op == OpType::kReducescatter &&
                 !(first.reduce_op == ReduceOp::kSum || first.reduce_op == ReduceOp::kAverage)) {
        return error(first, ErrorCode::kInvalidArgument,
                     what + ": reduce op " + reduce_op_name(first.reduce_op) +
                         " is not supported; reducescatter takes sum or average.");
      } else if (first.dtype == DataType::kBool &&
                 (first.reduce_op == ReduceOp::kAverage || first.prescale != 1.0 ||
                  first.postscale != 1.0)) {
        return error(first, ErrorCode::kInvalidArgument,
                     what +
                         ": bool tensors cannot be averaged or scaled; use sum (logical or), "
                         "min or max.");
      } else if (first.op == OpType::kReducescatter && !(msg = check_zero_d(reqs, what)).empty()) {
        return error(first, ErrorCode::kInvalidArgument, msg);
      } else {
        msg = check_same_shapes(reqs, what);
      }
      resp.shapes = first.shapes;
      if (first.op == OpType::kAllreduce) resp.joined_ranks = joined;
      break;
    }
    case OpType::kBroadcast: {
      if (!all_same(reqs, [](const Request& r) { return r.root; })) {
        msg = "Mismatched root ranks for " + what + ": " +
              by_value(reqs, [](const Request& r) { return "root " + std::to_string(r.root); }) +
              ". Every rank must name the same root.";
      } else if (first.root < 0 || first.root >= size) {
        return error(first, ErrorCode::kInvalidArgument,
                     what + ": root rank " + std::to_string(first.root) +
                         " is out of range; there are " + std::to_string(size) + " ranks (0 to " +
                         std::to_string(size - 1) + ").");
      } else {
        msg = check_same_shapes(reqs, what);
      }
      resp.shapes = first.shapes;
      break;
    }
    case OpType::kAllgather: {
      if (!(msg = check_zero_d(reqs, what)).empty()) {
        return error(first, ErrorCode::kInvalidArgument, msg);
      }
      msg = check_same_tails(reqs, what);
      resp.shapes = {first.shapes[0]};
      resp.first_dims.assign(size, 0);
      std::int64_t rows = 0;
      for (const auto& r : reqs) {
        resp.first_dims[r.rank] = r.shapes[0][0];
        if (__builtin_add_overflow(rows, r.shapes[0][0], &rows)) {
          return error(first, ErrorCode::kInvalidArgument,
                       what + ": the ranks' dimension 0 sum to more than 2^63 rows");
        }
      }
      break;
    }
    case OpType::kAlltoall: {
      if (!(msg = check_zero_d(reqs, what)).empty()) {
        return error(first, ErrorCode::kInvalidArgument, msg);
      }
      msg = check_same_tails(reqs, what);
      if (msg.empty()) {
        msg = alltoall_splits(reqs, size, what, &resp);
        if (!msg.empty()) return error(first, ErrorCode::kInvalidArgument, msg);
      }
      resp.shapes = {first.shapes[0]};
      break;
    }
    case OpType::kBarrier:
      resp.joined_ranks = joined;
      break;
    case OpType::kJoin:
    case OpType::kAddProcessSet:  // process_set_response, above
    case OpType::kRemoveProcessSet:
      break;
  }
  if (!msg.empty()) return error(first, ErrorCode::kMismatch, msg);
  return resp;
}

bool MessageTable::is_joined(int rank) const {
  return std::find(joined_.begin(), joined_.end(), rank) != joined_.end();
}

Status MessageTable::add_from(int sender, const std::vector<Request>& requests,
                              Clock::time_point now) {
  if (sender < 0 || sender >= size_) {
    return Internal("negotiation: a request list from rank " + std::to_string(sender) +
                    ", but there are " + std::to_string(size_) + " ranks");
  }
  for (const auto& r : requests) {
    if (r.rank != sender) {
      return InvalidArgument(
          "negotiation: rank " + std::to_string(sender) + " sent a request for '" + r.name +
          "' in the name of rank " + std::to_string(r.rank) +
          "; the message is corrupt or comes from a process that is not this job's rank " +
          std::to_string(sender));
    }
  }
  for (const auto& r : requests) add(r, now);
  return Status::OK();
}

void MessageTable::add(const Request& request, Clock::time_point now) {
  if (request.rank < 0 || request.rank >= size_) return;  // add_from reports these
  if (request.op == OpType::kJoin) {
    if (!is_joined(request.rank)) joined_.push_back(request.rank);
    return;
  }
  auto [it, inserted] = entries_.try_emplace(request.name);
  if (inserted) {
    it->second.by_rank.resize(size_);
    it->second.first_seen = now;
    order_.push_back(request.name);
  }
  it->second.by_rank[request.rank] = request;
}

std::vector<Response> MessageTable::take_ready() {
  std::vector<Response> ready;
  std::vector<std::string> remaining;
  for (const auto& name : order_) {
    Entry& e = entries_.at(name);
    bool complete = true;
    std::vector<Request> reqs;
    for (int r = 0; r < size_; ++r) {
      if (e.by_rank[r]) {
        reqs.push_back(*e.by_rank[r]);
      } else if (!is_joined(r)) {
        complete = false;
        break;
      }
    }
    if (!complete) {
      remaining.push_back(name);
      continue;
    }
    ready.push_back(make_response(reqs, joined_, size_));
    entries_.erase(name);
  }
  order_ = std::move(remaining);
  if (static_cast<int>(joined_.size()) == size_) {
    Response join;
    join.op = OpType::kJoin;
    join.name = "join";
    join.last_joined = joined_.back();
    ready.push_back(std::move(join));
    joined_.clear();
  }
  return ready;
}

std::vector<MessageTable::Stall> MessageTable::stalls(Clock::time_point now, double seconds) const {
  std::vector<Stall> out;
  for (const auto& name : order_) {
    const Entry& e = entries_.at(name);
    const double age = std::chrono::duration<double>(now - e.first_seen).count();
    if (age < seconds) continue;
    Stall s;
    s.name = name;
    s.seconds = age;
    for (int r = 0; r < size_; ++r) {
      if (e.by_rank[r]) {
        s.submitted.push_back(r);
      } else if (!is_joined(r)) {
        s.missing.push_back(r);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kolo::core
