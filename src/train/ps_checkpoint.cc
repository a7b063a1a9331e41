// ParameterServerStrategy's checkpoints of every shard (save_checkpoint,
// restore_checkpoint in parameter_server.h): values, optimizer state, step and version of
// each shard, read from and written back to the ps tasks, in one file written atomically.
//
// Not for: Model checkpoints (ModelCheckpoint, Model::save), the strategy (parameter_server.cc).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "common/durable_file.h"
#include "kolo/error.h"
#include "train/ps_impl.h"
#include "train/strategy_impl.h"

namespace kolo::train {
namespace {
void check(const Status& s) { check_status(s); }
}  // namespace

namespace {
constexpr char kMagic[] = "kolo-ps-checkpoint-1\n";

void put(std::string& out, const std::string& bytes) {
  const std::uint64_t n = bytes.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += bytes;
}
void put_int(std::string& out, std::int64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

struct Reader {
  const std::string& in;
  std::size_t at;
  const std::string& path;
  std::string bytes() {
    const std::int64_t n = integer();
    if (n < 0 || in.size() - at < static_cast<std::size_t>(n)) bad();
    std::string s = in.substr(at, static_cast<std::size_t>(n));
    at += static_cast<std::size_t>(n);
    return s;
  }
  std::int64_t integer() {
    if (in.size() - at < 8) bad();
    std::int64_t v;
    std::memcpy(&v, in.data() + at, 8);
    at += 8;
    return v;
  }
  [[noreturn]] void bad() {
    throw Error(ErrorCode::kInvalidArgument,
                "restore_checkpoint: '" + path + "' is truncated or damaged");
  }
};
}  // namespace

void ParameterServerStrategy::save_checkpoint(const std::string& path) const {
  ParameterServerStrategy::PsImpl& p = *impl_->ps;
  std::lock_guard<std::mutex> lock(p.mu);
  std::string out = kMagic;
  put_int(out, static_cast<std::int64_t>(p.shards.size()));
  for (const ps::ShardInfo& info : p.shards) {
    ps::ShardState st;
    check(p.client->read_state(info, &st, p.deadline()));
    put(out, info.variable);
    put_int(out, info.shard);
    put(out, st.values);
    put_int(out, st.step);
    put_int(out, st.version);
    put_int(out, static_cast<std::int64_t>(st.slots.size()));
    for (const auto& slot : st.slots) {
      put(out, slot.first);
      put(out, slot.second);
    }
  }
  // Whole or not at all: a full disk leaves the previous checkpoint and no temporary.
  const Status written = write_file_durably(path, {out});
  if (!written.ok()) {
    throw Error(written.code(), "save_checkpoint: '" + path +
                                    "' not written (the previous checkpoint, if any, is "
                                    "unchanged): " +
                                    written.message());
  }
}

void ParameterServerStrategy::restore_checkpoint(const std::string& path) const {
  ParameterServerStrategy::PsImpl& p = *impl_->ps;
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw Error(ErrorCode::kInvalidArgument, "restore_checkpoint: cannot read '" + path + "'");
  const std::string in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (in.rfind(kMagic, 0) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "restore_checkpoint: '" + path + "' is not a kolo parameter-server checkpoint");
  }
  std::lock_guard<std::mutex> lock(p.mu);
  Reader r{in, sizeof(kMagic) - 1, path};
  const std::int64_t n = r.integer();
  if (n != static_cast<std::int64_t>(p.shards.size())) {
    throw Error(ErrorCode::kMismatch,
                "restore_checkpoint: '" + path + "' has " + std::to_string(n) +
                    " shards; this job has " + std::to_string(p.shards.size()) +
                    " (the partitioner and the model must be the ones it was saved with)");
  }
  for (const ps::ShardInfo& info : p.shards) {
    const std::string variable = r.bytes();
    const std::int64_t shard = r.integer();
    if (variable != info.variable || shard != info.shard) {
      throw Error(ErrorCode::kMismatch, "restore_checkpoint: '" + path + "' holds '" + variable +
                                            "' shard " + std::to_string(shard) +
                                            " where this job has '" + info.variable + "' shard " +
                                            std::to_string(info.shard));
    }
    ps::ShardState st;
    st.values = r.bytes();
    st.step = r.integer();
    st.version = r.integer();
    const std::int64_t slots = r.integer();
    for (std::int64_t i = 0; i < slots; ++i) {
      std::string name = r.bytes();
      st.slots.emplace_back(std::move(name), r.bytes());
    }
    check(p.client->assign_state(info, st, p.deadline()));
  }
}

}  // namespace kolo::train
