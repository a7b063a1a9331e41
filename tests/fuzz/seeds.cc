// Writes the seed inputs of coordinator_fuzz.cc into a directory: well-formed request
// lists of 1-4 ranks for every op, plus the cases the fuzzer once found (a request in
// another rank's name, splits whose sum overflows, huge shapes). scripts/fuzz.sh starts
// from these; the committed corpus holds them and what the fuzzer added.
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/message.h"

namespace {

using kolo::core::OpType;
using kolo::core::Request;

Request req(int rank, OpType op, kolo::core::Shape shape, const std::string& name) {
  Request r;
  r.rank = rank;
  r.op = op;
  r.name = name;
  r.shapes = {std::move(shape)};
  return r;
}

std::string input(const std::vector<std::vector<Request>>& per_rank) {
  std::string out(1, static_cast<char>(per_rank.size() - 1));
  for (const auto& reqs : per_rank) {
    const std::string bytes = kolo::core::encode_requests(reqs);
    out += static_cast<char>(bytes.size() & 0xff);
    out += static_cast<char>((bytes.size() >> 8) & 0xff);
    out += bytes;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, std::string>> seeds;
  const OpType ops[] = {OpType::kAllreduce, OpType::kAllgather,     OpType::kBroadcast,
                        OpType::kAlltoall,  OpType::kReducescatter, OpType::kBarrier,
                        OpType::kJoin};
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (OpType op : ops) {
      std::vector<std::vector<Request>> lists;
      for (int r = 0; r < ranks; ++r) lists.push_back({req(r, op, {4, 2}, "t")});
      seeds.emplace_back(
          std::string("ok_") + kolo::core::op_name(op) + "_np" + std::to_string(ranks),
          input(lists));
    }
  }
  seeds.emplace_back("forged_rank", input({{req(0, OpType::kAllreduce, {4}, "t")},
                                           {req(0, OpType::kAllreduce, {4}, "t")}}));
  seeds.emplace_back("rank_out_of_range", input({{req(0, OpType::kAllreduce, {4}, "t")},
                                                 {req(1 << 30, OpType::kAllreduce, {4}, "t")}}));
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  Request a0 = req(0, OpType::kAlltoall, {4}, "a");
  Request a1 = req(1, OpType::kAlltoall, {4}, "a");
  a1.splits = {big, big};
  seeds.emplace_back("alltoall_splits_overflow", input({{a0}, {a1}}));
  Request h0 = req(0, OpType::kAllreduce, {1 << 30, 1 << 30}, "h");
  Request h1 = req(1, OpType::kAllreduce, {std::int64_t{1} << 40, std::int64_t{1} << 40}, "h");
  seeds.emplace_back("huge_shapes_mismatch", input({{h0}, {h1}}));
  for (const auto& [name, bytes] : seeds) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  }
  std::printf("seeds: wrote %zu inputs to %s\n", seeds.size(), dir.c_str());
  return 0;
}
