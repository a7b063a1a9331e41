// Where a parameter-server job's variables live: how many shards each is split into along
// its first axis (TensorFlow's variable partitioners, with their arithmetic), which rows
// each shard holds, and which ps task holds each shard (round-robin in creation order).
//
//   Partitioner p = Partitioner::min_size(256 << 10, /*max_shards=*/2);
//   std::vector<ShardInfo> shards = place_variables(specs, p, /*num_ps=*/2);
//
// Pure: shapes in, shards out. Not for: storing or updating shards (ps_service.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kolo/train/variable_partitioner.h"
#include "kolo/types.h"
#include "ps/ps_service.h"

namespace kolo::ps {

// tf.distribute.experimental.partitioners: the number of shards along axis 0 of a
// variable of `shape` whose elements take `element_bytes`. 0-d variables, and variables
// with fewer rows than the partitioner asks for, get min(asked, rows) (at least 1).
// The arithmetic of the public kolo::train::VariablePartitioner (the one description of a
// partitioner; this class adds what it computes).
class Partitioner {
 public:
  // One shard per variable (ParameterServerStrategy without a variable_partitioner).
  Partitioner() = default;
  explicit Partitioner(train::VariablePartitioner spec) : spec_(spec) {}
  // FixedShardsPartitioner(num_shards): min(num_shards, rows).
  static Partitioner fixed_shards(int num_shards);
  // MinSizePartitioner(min_shard_bytes, max_shards): as many shards as keep each at least
  // min_shard_bytes, at most max_shards: max(1, min(rows, max_shards,
  // ceil(bytes / min_shard_bytes))). TensorFlow's defaults: 256 KiB, 1.
  static Partitioner min_size(std::int64_t min_shard_bytes = 256 << 10, int max_shards = 1);
  // MaxSizePartitioner(max_shard_bytes, max_shards): shards of at most max_shard_bytes
  // where a row allows it: rows per shard = max(1, floor(max_shard_bytes / row bytes)),
  // shards = ceil(rows / rows per shard), capped at max_shards (0: no cap).
  static Partitioner max_size(std::int64_t max_shard_bytes, int max_shards = 0);

  int num_shards(const std::vector<std::int64_t>& shape, std::size_t element_bytes) const;
  // "FixedShardsPartitioner(num_shards=2)", for logs and errors.
  std::string to_string() const;
  // kInvalidArgument for a count or size below 1, naming the partitioner and the value.
  Status validate() const;

 private:
  using Kind = train::VariablePartitioner::Kind;
  train::VariablePartitioner spec_;
};

// TensorFlow's division of `rows` over `shards` (sharded_variable's partition): the first
// rows % shards shards get one row more. 13 rows over 5: [0,3) [3,6) [6,9) [9,11) [11,13).
std::vector<std::pair<std::int64_t, std::int64_t>> shard_rows(std::int64_t rows, int shards);

// A variable to place: its name, shape and dtype (float32 or float64).
struct VariableSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  DataType dtype = DataType::kFloat32;
};

// Every variable's shards, in creation order, each on ps task (counter++ % num_ps): the
// counter runs over the shards of all variables, as TensorFlow's round-robin placement of
// variables (and of a sharded variable's shards) does. kInvalidArgument for num_ps < 1, a
// bad partitioner, a dtype other than float32/float64 (naming the variable), a
// duplicate name.
Status place_variables(const std::vector<VariableSpec>& variables, const Partitioner& partitioner,
                       int num_ps, std::vector<ShardInfo>* out);

}  // namespace kolo::ps
