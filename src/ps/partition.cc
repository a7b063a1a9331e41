// Variable partitioners and round-robin placement (partition.h).
#include "ps/partition.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace kolo::ps {
namespace {

std::int64_t elements_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

}  // namespace

Partitioner Partitioner::fixed_shards(int num_shards) {
  return Partitioner(train::VariablePartitioner::fixed_shards(num_shards));
}

Partitioner Partitioner::min_size(std::int64_t min_shard_bytes, int max_shards) {
  return Partitioner(train::VariablePartitioner::min_size(min_shard_bytes, max_shards));
}

Partitioner Partitioner::max_size(std::int64_t max_shard_bytes, int max_shards) {
  return Partitioner(train::VariablePartitioner::max_size(max_shard_bytes, max_shards));
}

int Partitioner::num_shards(const std::vector<std::int64_t>& shape,
                            std::size_t element_bytes) const {
  if (shape.empty() || shape[0] <= 1) return 1;
  const std::int64_t rows = shape[0];
  const double total = static_cast<double>(elements_of(shape)) * static_cast<double>(element_bytes);
  std::int64_t n = 1;
  switch (spec_.kind) {
    case Kind::kNone:
      n = 1;
      break;
    case Kind::kFixedShards:
      n = std::min<std::int64_t>(spec_.shards, rows);
      break;
    case Kind::kMinSize: {
      const auto wanted =
          static_cast<std::int64_t>(std::ceil(total / static_cast<double>(spec_.bytes)));
      n = std::max<std::int64_t>(1,
                                 std::min({rows, static_cast<std::int64_t>(spec_.shards), wanted}));
      break;
    }
    case Kind::kMaxSize: {
      const double row_bytes = total / static_cast<double>(rows);
      const auto rows_per_shard = std::max<std::int64_t>(
          1, static_cast<std::int64_t>(std::floor(static_cast<double>(spec_.bytes) / row_bytes)));
      n = (rows + rows_per_shard - 1) / rows_per_shard;
      if (spec_.shards > 0) n = std::min<std::int64_t>(n, spec_.shards);
      break;
    }
  }
  return static_cast<int>(std::max<std::int64_t>(1, n));
}

std::string Partitioner::to_string() const {
  switch (spec_.kind) {
    case Kind::kNone:
      return "no partitioner";
    case Kind::kFixedShards:
      return "FixedShardsPartitioner(num_shards=" + std::to_string(spec_.shards) + ")";
    case Kind::kMinSize:
      return "MinSizePartitioner(min_shard_bytes=" + std::to_string(spec_.bytes) +
             ", max_shards=" + std::to_string(spec_.shards) + ")";
    case Kind::kMaxSize:
      return "MaxSizePartitioner(max_shard_bytes=" + std::to_string(spec_.bytes) +
             ", max_shards=" + std::to_string(spec_.shards) + ")";
  }
  return "?";
}

Status Partitioner::validate() const {
  const bool bad_shards = spec_.kind == Kind::kMaxSize ? spec_.shards < 0 : spec_.shards < 1;
  if (spec_.kind != Kind::kNone && bad_shards) {
    return InvalidArgument(to_string() + ": the number of shards must be at least 1" +
                           (spec_.kind == Kind::kMaxSize ? " (or 0: no limit)" : ""));
  }
  if ((spec_.kind == Kind::kMinSize || spec_.kind == Kind::kMaxSize) && spec_.bytes < 1) {
    return InvalidArgument(to_string() + ": the shard size in bytes must be at least 1");
  }
  return Status::OK();
}

std::vector<std::pair<std::int64_t, std::int64_t>> shard_rows(std::int64_t rows, int shards) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  if (shards < 1) return out;
  const std::int64_t base = rows / shards, extra = rows % shards;
  std::int64_t begin = 0;
  for (int i = 0; i < shards; ++i) {
    const std::int64_t n = base + (i < extra ? 1 : 0);
    out.emplace_back(begin, begin + n);
    begin += n;
  }
  return out;
}

Status place_variables(const std::vector<VariableSpec>& variables, const Partitioner& partitioner,
                       int num_ps, std::vector<ShardInfo>* out) {
  out->clear();
  if (num_ps < 1) {
    return InvalidArgument("parameter-server training needs at least one ps task (got " +
                           std::to_string(num_ps) + ")");
  }
  KOLO_RETURN_IF_ERROR(partitioner.validate());
  std::set<std::string> names;
  int next_ps = 0;
  for (const VariableSpec& v : variables) {
    if (!names.insert(v.name).second) {
      return InvalidArgument("the variable '" + v.name + "' is created twice");
    }
    if (v.dtype != DataType::kFloat32 && v.dtype != DataType::kFloat64) {
      return InvalidArgument("the variable '" + v.name + "' is " + dtype_name(v.dtype) +
                             ": ps tasks hold float32 and float64 variables only");
    }
    for (std::int64_t d : v.shape) {
      if (d < 0) return InvalidArgument("the variable '" + v.name + "' has a negative dimension");
    }
    const int n = partitioner.num_shards(v.shape, dtype_size(v.dtype));
    const std::int64_t rows = v.shape.empty() ? 1 : v.shape[0];
    const auto ranges = shard_rows(rows, n);
    for (int s = 0; s < n; ++s) {
      ShardInfo info;
      info.variable = v.name;
      info.shard = s;
      info.ps_task = next_ps;
      next_ps = (next_ps + 1) % num_ps;
      info.dtype = v.dtype;
      info.shape = v.shape;
      if (!v.shape.empty()) info.shape[0] = ranges[s].second - ranges[s].first;
      info.row_begin = ranges[s].first;
      out->push_back(std::move(info));
    }
  }
  return Status::OK();
}

}  // namespace kolo::ps

namespace kolo::train {

// The public partitioner's factories (include/kolo/train/variable_partitioner.h): here,
// beside the arithmetic that reads them.
namespace {
VariablePartitioner partitioner(VariablePartitioner::Kind kind, std::int64_t bytes, int shards) {
  VariablePartitioner p;
  p.kind = kind;
  p.bytes = bytes;
  p.shards = shards;
  return p;
}
}  // namespace

VariablePartitioner VariablePartitioner::fixed_shards(int num_shards) {
  return partitioner(Kind::kFixedShards, 0, num_shards);
}

VariablePartitioner VariablePartitioner::min_size(std::int64_t min_shard_bytes, int max_shards) {
  return partitioner(Kind::kMinSize, min_shard_bytes, max_shards);
}

VariablePartitioner VariablePartitioner::max_size(std::int64_t max_shard_bytes, int max_shards) {
  return partitioner(Kind::kMaxSize, max_shard_bytes, max_shards);
}

}  // namespace kolo::train
