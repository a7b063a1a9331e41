// SidecarEvaluator (parameter_server.h): the evaluator task's loop over the chief's
// checkpoints. A checkpoint is read as ModelCheckpoint writes it (Model::save: the weights
// under "weights/<name>"), so the evaluator needs no ps task and no collective.
//
// Not for: writing checkpoints (callbacks), the training job (ps_fit.cc).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "kolo/error.h"
#include "kolo/torch.h"
#include "kolo/train/model.h"
#include "kolo/train/parameter_server.h"

namespace kolo::train {

struct SidecarEvaluator::Impl {
  Model* model;
  Dataset data;
  SidecarEvaluatorOptions options;
  std::map<std::string, std::filesystem::file_time_type> done;  // evaluated, by path

  // The newest checkpoint not yet evaluated (in its current version), or "".
  std::string next() {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string best;
    fs::file_time_type best_time{};
    for (const auto& e : fs::directory_iterator(options.checkpoint_dir, ec)) {
      if (!e.is_regular_file(ec)) continue;
      const std::string path = e.path().string();
      if (path.size() > 4 && path.compare(path.size() - 4, 4, ".tmp") == 0) continue;
      const auto t = e.last_write_time(ec);
      auto it = done.find(path);
      if (it != done.end() && it->second == t) continue;
      if (best.empty() || t > best_time) {
        best = path;
        best_time = t;
      }
    }
    if (!best.empty()) done[best] = best_time;
    return best;
  }

  Logs evaluate(const std::string& path) {
    torch::serialize::InputArchive archive;
    load_archive(archive, path);
    auto weights = model->get_weights();
    for (auto& [name, t] : weights) {
      torch::Tensor v;
      archive.read("weights/" + name, v, /*is_buffer=*/true);
      t = v;
    }
    model->set_weights(weights);
    EvaluateOptions eo;
    eo.batch_size = options.batch_size;
    eo.steps = options.steps;
    eo.verbose = 0;
    Logs logs = model->evaluate(data, eo);
    std::string line = "Evaluated checkpoint " + path + ":";
    bool first = true;
    for (const auto& [k, v] : logs) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s %s %.4f", first ? "" : " -", k.c_str(), v);
      line += buf;
      first = false;
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    return logs;
  }
};

SidecarEvaluator::SidecarEvaluator(Model& model, const Dataset& data,
                                   SidecarEvaluatorOptions options)
    : impl_(std::make_unique<Impl>(Impl{&model, data, std::move(options), {}})) {
  if (impl_->options.checkpoint_dir.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "SidecarEvaluator: checkpoint_dir is empty; give the directory the chief's "
                "ModelCheckpoint writes to");
  }
}

SidecarEvaluator::~SidecarEvaluator() = default;

std::vector<Logs> SidecarEvaluator::start() {
  std::vector<Logs> all;
  const int max = impl_->options.max_evaluations;
  while (max < 0 || static_cast<int>(all.size()) < max) {
    const std::string path = impl_->next();
    if (path.empty()) {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(std::max(0.01, impl_->options.poll_seconds)));
      continue;
    }
    // The chief renames a checkpoint into place whole; a read of one being replaced at
    // that moment fails and is tried again at the next look.
    try {
      all.push_back(impl_->evaluate(path));
    } catch (const Error& e) {
      std::fprintf(stderr, "SidecarEvaluator: %s (tried again at its next version)\n", e.what());
      impl_->done.erase(path);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  return all;
}

}  // namespace kolo::train
