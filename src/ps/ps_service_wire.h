// The ps service's methods and field names, shared by PsService and PsClient so the two
// sides spell them once.
//
//   ps.create        variable, shard, dtype, row_begin, ndim, dim.<k>, rule.*, replicas;
//                    blob: initial values. Reply: existed.
//   ps.pull          n; per item <i>.variable, <i>.shard, <i>.whole, <i>.min_version;
//                    blob i: rows (int64, empty when whole). Reply: <i>.version; blob i:
//                    values.
//   ps.push          n; per item <i>.variable, <i>.shard, <i>.whole, <i>.version;
//                    blobs 2i, 2i+1: rows, gradient. Reply: <i>.accepted.
//   ps.set_learning_rate  learning_rate.
//   ps.read_state    variable, shard. Reply: step, version, slots, slot.<k>; blobs: values,
//                    then the slots.
//   ps.assign_state  the same fields and blobs as read_state's reply, plus variable, shard.
//   ps.ping          nothing.
#pragma once

#include <string>

namespace kolo::ps::wire {

inline constexpr const char* kCreate = "ps.create";
inline constexpr const char* kPull = "ps.pull";
inline constexpr const char* kPush = "ps.push";
inline constexpr const char* kSetLearningRate = "ps.set_learning_rate";
inline constexpr const char* kReadState = "ps.read_state";
inline constexpr const char* kAssignState = "ps.assign_state";
inline constexpr const char* kPing = "ps.ping";

// Fields that several methods share: the item count of a batched pull or push, whether an
// item is its shard's whole variable, and a shard's version.
inline constexpr const char* kItemCount = "n";
inline constexpr const char* kWhole = "whole";
inline constexpr const char* kVersion = "version";

// The most items one batched pull or push may carry.
inline constexpr std::int64_t kMaxBatchItems = 1 << 15;

inline std::string item(std::size_t i, const char* name) { return std::to_string(i) + "." + name; }

}  // namespace kolo::ps::wire
