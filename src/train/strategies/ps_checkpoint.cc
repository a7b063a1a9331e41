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
#include <string_view>

#include "common/coding.h"
#include "common/durable_file.h"
#include "kolo/error.h"
#include "train/strategies/ps_impl.h"
#include "train/strategies/strategy_impl.h"

namespace kolo::train {
namespace {
void check(const Status& s) { check_status(s); }
}  // namespace

namespace {
constexpr char kMagic[] = "kolo-ps-checkpoint-1\n";

// The file after its magic: integers as 64 bits, byte strings after a 64-bit length, in
// common/coding.h's forms.
void put(std::string& out, const std::string& bytes) {
  coding::put_bytes<std::uint64_t>(&out, bytes);
}
void put_int(std::string& out, std::int64_t v) { coding::put(&out, v); }

// Reads the file front to back; anything cut short or damaged is an error naming it.
class Reader {
 public:
  Reader(std::string_view in, const std::string& path) : in_(in), path_(path) {}
  std::string bytes() {
    std::string s;
    if (!in_.get_bytes<std::uint64_t>(in_.left(), &s)) bad();
    return s;
  }
  std::int64_t integer() {
    std::int64_t v = 0;
    if (!in_.get(&v)) bad();
    return v;
  }

 private:
  [[noreturn]] void bad() {
    throw Error(ErrorCode::kInvalidArgument,
                "restore_checkpoint: '" + path_ + "' is truncated or damaged");
  }
  coding::ByteReader in_;
  const std::string& path_;
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
  Reader r(std::string_view(in).substr(sizeof(kMagic) - 1), path);
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
