// Checkpoint, CheckpointManager and latest_checkpoint (kolo/train/checkpoint.h).
//
// A checkpoint file is kolo::save_archive's framed archive holding "kolo.save_counter",
// and per tracked name a sub-archive: "module.<name>" (parameters and buffers under their
// module paths), "optimizer.<name>" (torch::optim's own save), or a tensor "tensor.<name>".
// The "checkpoint" file is TensorFlow's CheckpointState text, paths relative to its
// directory.
#include "kolo/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/durable_file.h"
#include "kolo/error.h"
#include "kolo/kolo.h"
#include "kolo/torch.h"

namespace kolo::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCounterKey = "kolo.save_counter";
constexpr const char* kStateFile = "checkpoint";

[[noreturn]] void fail(const std::string& what) { throw Error(ErrorCode::kInvalidArgument, what); }

// Only the chief writes in a job of several workers.
bool writes_here() { return !kolo::is_initialized() || kolo::rank() == 0; }

// A directory's one spelling: "ckpts/", "./ckpts" and "ckpts" are "ckpts".
std::string clean_directory(const std::string& d) {
  std::string c = fs::path(d.empty() ? "." : d).lexically_normal().string();
  while (c.size() > 1 && c.back() == '/') c.pop_back();
  return c.empty() ? "." : c;
}

std::string directory_of(const std::string& path) {
  return clean_directory(fs::path(path).parent_path().string());
}

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

// TensorFlow's CheckpointState: model_checkpoint_path and all_model_checkpoint_paths.
struct State {
  std::string latest;
  std::vector<std::string> all;
};

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The value of `key: "..."` lines; false for a line of another form.
bool parse_line(const std::string& line, std::string* key, std::string* value) {
  const auto colon = line.find(':');
  if (colon == std::string::npos) return false;
  *key = line.substr(0, colon);
  key->erase(0, key->find_first_not_of(" \t"));
  const auto open = line.find('"', colon);
  if (open == std::string::npos) return false;
  value->clear();
  for (std::size_t i = open + 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size()) {
      *value += line[++i];
    } else if (line[i] == '"') {
      return true;
    } else {
      *value += line[i];
    }
  }
  return false;
}

// The state in `directory` (nullopt without a readable file).
std::optional<State> read_state(const std::string& directory) {
  std::ifstream in(fs::path(directory) / kStateFile);
  if (!in) return std::nullopt;
  State st;
  std::string line, key, value;
  while (std::getline(in, line)) {
    if (!parse_line(line, &key, &value)) continue;
    if (key == "model_checkpoint_path") st.latest = value;
    if (key == "all_model_checkpoint_paths") st.all.push_back(value);
  }
  if (st.latest.empty()) return std::nullopt;
  return st;
}

// A path as the state file keeps it: relative to `directory` when inside it.
std::string relative(const std::string& directory, const std::string& path) {
  return directory_of(path) == clean_directory(directory) ? file_name(path) : path;
}

std::string absolute_in(const std::string& directory, const std::string& kept) {
  if (fs::path(kept).is_absolute() || kept.find('/') != std::string::npos) return kept;
  return (fs::path(clean_directory(directory)) / kept).string();
}

void write_state(const std::string& directory, const std::string& latest,
                 const std::vector<std::string>& all) {
  std::string text = "model_checkpoint_path: " + quoted(relative(directory, latest)) + "\n";
  for (const std::string& p : all) {
    text += "all_model_checkpoint_paths: " + quoted(relative(directory, p)) + "\n";
  }
  const std::string path = (fs::path(directory) / kStateFile).string();
  const Status s = write_file_durably(path, {text});
  if (!s.ok()) fail("checkpoint: cannot write " + path + ": " + s.message());
}

}  // namespace

void Checkpoint::check_new_name(const std::string& name) const {
  if (name.empty()) fail("Checkpoint::track: a name is required");
  const auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& e) { return e.name == name; });
  };
  if (taken(modules_) || taken(optimizers_) || taken(tensors_)) {
    fail("Checkpoint::track: '" + name + "' is tracked already; give each object its own name");
  }
}

Checkpoint& Checkpoint::track(const std::string& name, std::shared_ptr<torch::nn::Module> module) {
  check_new_name(name);
  if (!module) fail("Checkpoint::track: the module '" + name + "' is null");
  modules_.push_back({name, std::move(module)});
  return *this;
}

Checkpoint& Checkpoint::track(const std::string& name, torch::optim::Optimizer& optimizer) {
  check_new_name(name);
  optimizers_.push_back({name, &optimizer});
  return *this;
}

Checkpoint& Checkpoint::track(const std::string& name, torch::Tensor tensor) {
  check_new_name(name);
  if (!tensor.defined()) fail("Checkpoint::track: the tensor '" + name + "' is undefined");
  tensors_.push_back({name, std::move(tensor)});
  return *this;
}

std::string Checkpoint::write(const std::string& path) const {
  if (!writes_here()) return path;
  std::error_code ec;
  fs::create_directories(directory_of(path), ec);  // as TensorFlow's save; else save_archive says
  torch::serialize::OutputArchive archive;
  archive.write(kCounterKey, torch::tensor({save_counter_}, torch::kLong));
  for (const Module& m : modules_) {
    torch::serialize::OutputArchive sub;
    for (const auto& p : m.module->named_parameters(true)) sub.write(p.key(), p.value().detach());
    for (const auto& b : m.module->named_buffers(true)) sub.write(b.key(), b.value(), true);
    archive.write("module." + m.name, sub);
  }
  for (const Optimizer& o : optimizers_) {
    torch::serialize::OutputArchive sub;
    o.optimizer->save(sub);
    archive.write("optimizer." + o.name, sub);
  }
  for (const Tensor& t : tensors_) archive.write("tensor." + t.name, t.tensor.detach());
  save_archive(archive, path);
  return path;
}

std::string Checkpoint::save(const std::string& file_prefix) {
  ++save_counter_;
  const std::string path = file_prefix + "-" + std::to_string(save_counter_);
  write(path);
  if (writes_here()) {
    const std::string dir = directory_of(path);
    std::vector<std::string> all;
    if (const auto st = read_state(dir)) {
      for (const std::string& p : st->all) {
        if (absolute_in(dir, p) != path && relative(dir, path) != p) all.push_back(p);
      }
    }
    all.push_back(path);
    write_state(dir, path, all);
  }
  return path;
}

void Checkpoint::restore(const std::string& path) {
  torch::serialize::InputArchive archive;
  load_archive(archive, path);  // throws naming the file when it is missing or damaged
  const auto read = [&](auto& from, const std::string& key, torch::Tensor& into,
                        const std::string& what) {
    torch::Tensor saved;
    try {
      from.read(key, saved);
    } catch (const c10::Error&) {
      fail("checkpoint " + path + ": it holds no " + what +
           " (was it saved with the same objects tracked under the same names?)");
    }
    if (saved.sizes() != into.sizes()) {
      fail("checkpoint " + path + ": " + what + " is " + shape_string(saved.sizes().vec()) +
           " there but " + shape_string(into.sizes().vec()) + " here (another model?)");
    }
    torch::NoGradGuard no_grad;
    into.copy_(saved);
  };
  const auto sub_archive = [&](const std::string& key, const std::string& what) {
    torch::serialize::InputArchive sub;
    if (!archive.try_read(key, sub)) {
      fail("checkpoint " + path + ": it holds no " + what +
           " (was it saved with the same objects tracked under the same names?)");
    }
    return sub;
  };
  for (Module& m : modules_) {
    torch::serialize::InputArchive sub = sub_archive("module." + m.name, "module '" + m.name + "'");
    for (auto& p : m.module->named_parameters(true)) {
      read(sub, p.key(), p.value(), "parameter '" + p.key() + "' of module '" + m.name + "'");
    }
    for (auto& b : m.module->named_buffers(true)) {
      read(sub, b.key(), b.value(), "buffer '" + b.key() + "' of module '" + m.name + "'");
    }
  }
  for (Optimizer& o : optimizers_) {
    torch::serialize::InputArchive sub =
        sub_archive("optimizer." + o.name, "optimizer '" + o.name + "'");
    try {
      o.optimizer->load(sub);
    } catch (const c10::Error& e) {
      fail("checkpoint " + path + ": optimizer '" + o.name +
           "' cannot take its state (another optimizer or other parameters?): " +
           e.what_without_backtrace());
    }
  }
  for (Tensor& t : tensors_) read(archive, "tensor." + t.name, t.tensor, "tensor '" + t.name + "'");
  torch::Tensor counter = torch::zeros({1}, torch::kLong);
  read(archive, kCounterKey, counter, "save counter");
  save_counter_ = counter.item<std::int64_t>();
}

std::optional<std::string> latest_checkpoint(const std::string& directory) {
  const auto st = read_state(directory);
  if (!st) return std::nullopt;
  const std::string path = absolute_in(directory, st->latest);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  return path;
}

CheckpointManager::CheckpointManager(Checkpoint& checkpoint, std::string directory,
                                     std::optional<int> max_to_keep, std::string checkpoint_name)
    : checkpoint_(checkpoint),
      directory_(clean_directory(directory)),
      max_to_keep_(max_to_keep),
      checkpoint_name_(std::move(checkpoint_name)) {
  if (max_to_keep_ && *max_to_keep_ < 1) {
    fail("CheckpointManager: max_to_keep is " + std::to_string(*max_to_keep_) +
         "; keep at least 1, or give std::nullopt to keep every checkpoint");
  }
  if (checkpoint_name_.empty() || checkpoint_name_.find('/') != std::string::npos) {
    fail("CheckpointManager: checkpoint_name '" + checkpoint_name_ +
         "' must be a file name (no '/')");
  }
  if (writes_here()) {
    std::error_code ec;
    fs::create_directories(directory_, ec);
    if (ec) fail("CheckpointManager: cannot create " + directory_ + ": " + ec.message());
  }
  if (const auto st = read_state(directory_)) {
    std::error_code ec;
    for (const std::string& p : st->all) {
      const std::string path = absolute_in(directory_, p);
      if (fs::exists(path, ec)) kept_.push_back(path);
    }
  }
}

std::string CheckpointManager::save(std::optional<std::int64_t> checkpoint_number) {
  std::string path;
  if (checkpoint_number) {
    // TensorFlow's rule: the save counter goes up even when the number is given.
    ++checkpoint_.save_counter_;
    path = (fs::path(directory_) / (checkpoint_name_ + "-" + std::to_string(*checkpoint_number)))
               .string();
    checkpoint_.write(path);
  } else {
    // The counter goes up as Checkpoint::save's does, without its own state file update.
    const std::string prefix = (fs::path(directory_) / checkpoint_name_).string();
    path = prefix + "-" + std::to_string(checkpoint_.save_counter() + 1);
    checkpoint_.save(prefix);
  }
  kept_.erase(std::remove(kept_.begin(), kept_.end(), path), kept_.end());
  kept_.push_back(path);
  while (max_to_keep_ && static_cast<int>(kept_.size()) > *max_to_keep_) {
    if (writes_here()) {
      std::error_code ec;
      fs::remove(kept_.front(), ec);
    }
    kept_.erase(kept_.begin());
  }
  if (writes_here()) write_state(directory_, path, kept_);
  return path;
}

std::optional<std::string> CheckpointManager::latest_checkpoint() const {
  if (kept_.empty()) return std::nullopt;
  return kept_.back();
}

std::optional<std::string> CheckpointManager::restore_or_initialize() {
  const auto latest = latest_checkpoint();
  if (latest) checkpoint_.restore(*latest);
  return latest;
}

}  // namespace kolo::train
