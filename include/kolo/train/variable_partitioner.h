// tf.distribute.experimental.partitioners: how a parameter-server job splits a variable into
// shards along its first axis (ParameterServerStrategy's `partitioner`). Part of
// <kolo/train.h>. The arithmetic (TensorFlow's) is the ps layer's: src/ps/partition.h.
//
// Not for: where the shards go (round-robin over the ps tasks, docs/ps.md).
#pragma once

#include <cstdint>

namespace kolo::train {

class VariablePartitioner {
 public:
  VariablePartitioner() = default;  // one shard per variable
  // FixedShardsPartitioner(num_shards): min(num_shards, rows) shards.
  static VariablePartitioner fixed_shards(int num_shards);
  // MinSizePartitioner: shards of at least min_shard_bytes, at most max_shards.
  static VariablePartitioner min_size(std::int64_t min_shard_bytes = 256 << 10, int max_shards = 1);
  // MaxSizePartitioner: shards of at most max_shard_bytes (0 max_shards: no cap).
  static VariablePartitioner max_size(std::int64_t max_shard_bytes, int max_shards = 0);

  enum class Kind : std::uint8_t { kNone, kFixedShards, kMinSize, kMaxSize };
  Kind kind = Kind::kNone;
  std::int64_t bytes = 0;
  int shards = 1;
};

}  // namespace kolo::train
