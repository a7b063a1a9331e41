// A worker of tests/elastic/fit_elastic_test.sh: Model::fit with MultiWorkerMirroredStrategy
// on a small fixed problem, elastic (FitOptions::elastic) or plain, that logs what it
// trained on.
//
//   kolo_fit_elastic_worker elastic|plain OUTDIR [EPOCHS]
//
// The examples carry their index as an extra last column, which the model's forward drops
// after appending "batch <generation> <epoch> <batch> <index>..." to OUTDIR/log.<id> (id:
// KOLO_ELASTIC_ID, else the rank): one line per step and replica of what really went
// through the model. Each worker writes OUTDIR/pid.<id> when it starts; the chief writes
// OUTDIR/history.<pid> at the end: one line per epoch of its History ("epoch <n> loss <l>
// accuracy <a> val_loss <l> val_accuracy <a>") and "workers <n>". Each step sleeps
// KOLO_TEST_STEP_MS (default 20) ms, so that a test can kill a worker mid-epoch.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "kolo/kolo.h"
#include "kolo/train.h"
#include "train/testing/tiny_problem.h"

namespace kt = kolo::train;

namespace {

std::string worker_id() {
  const char* id = std::getenv("KOLO_ELASTIC_ID");
  return id ? id : std::to_string(kolo::rank());
}

// Where the loop is, for the forward's log line (callbacks run on the training thread
// before each step).
struct Position : kt::Callback {
  int epoch = -1, batch = -1;
  void on_epoch_begin(int e, kt::Logs&) override { epoch = e; }
  void on_train_batch_begin(int b, kt::Logs&) override { batch = b; }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s elastic|plain OUTDIR [EPOCHS]\n", argv[0]);
    return 2;
  }
  const bool elastic = std::string(argv[1]) == "elastic";
  const std::string out = argv[2];
  const int epochs = argc > 3 ? std::atoi(argv[3]) : 4;
  const char* ms_text = std::getenv("KOLO_TEST_STEP_MS");
  const int step_ms = ms_text ? std::atoi(ms_text) : 20;

  kt::MultiWorkerMirroredStrategy strategy;
  const std::string id = worker_id();
  std::ofstream(out + "/pid." + id) << getpid() << "\n";
  std::FILE* log = std::fopen((out + "/log." + id).c_str(), "a");
  if (!log) {
    std::fprintf(stderr, "cannot open %s/log.%s\n", out.c_str(), id.c_str());
    return 2;
  }

  // 480 examples of 8 features and their index; 120 more to validate on.
  const auto p = kt::testing::tiny_problem(600);
  const torch::Tensor index = torch::arange(600, torch::kFloat32).unsqueeze(1);
  const torch::Tensor x = torch::cat({p.x, index}, 1);
  auto position = std::make_shared<Position>();
  std::mutex log_mu;
  torch::nn::Sequential net = kt::testing::tiny_net();
  kt::Model model(
      net.ptr(),
      [&](torch::nn::Module& m, const torch::Tensor& in) {
        if (m.is_training()) {
          const torch::Tensor idx = in.select(1, in.size(1) - 1).to(torch::kLong).contiguous();
          std::ostringstream line;
          line << "batch " << kolo::elastic::generation() << " " << position->epoch << " "
               << position->batch;
          const auto* p = idx.data_ptr<std::int64_t>();
          for (std::int64_t i = 0; i < idx.numel(); ++i) line << " " << p[i];
          std::lock_guard<std::mutex> lock(log_mu);
          std::fprintf(log, "%s\n", line.str().c_str());
          std::fflush(log);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
        return dynamic_cast<torch::nn::SequentialImpl&>(m).forward(in.slice(1, 0, in.size(1) - 1));
      },
      strategy);
  model.compile(kt::Adam{.learning_rate = 0.01},
                std::make_shared<kt::SparseCategoricalCrossentropy>(true), {"accuracy"});
  kt::FitOptions o{.epochs = epochs, .batch_size = 24, .verbose = 0, .callbacks = {position}};
  o.validation_data = kt::Dataset::from_tensors(x.slice(0, 480, 600), p.y.slice(0, 480, 600));
  o.elastic = {.enabled = elastic, .commit_every = 4};
  kt::History h;
  try {
    h = model.fit(x.slice(0, 0, 480), p.y.slice(0, 0, 480), o);
  } catch (const kolo::Error& e) {
    std::fprintf(stderr, "worker %s: %s\n", id.c_str(), e.what());
    return 1;
  }
  std::fclose(log);
  if (!kolo::is_initialized()) {
    std::printf("worker %s left the elastic job\n", id.c_str());
    return 0;
  }
  if (model.is_chief()) {
    std::ofstream f(out + "/history." + std::to_string(getpid()));
    for (std::size_t i = 0; i < h.epochs.size(); ++i) {
      f << "epoch " << h.epochs[i];
      for (const char* name : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
        f << " " << name << " " << h.history[name].at(i);
      }
      f << "\n";
    }
    f << "workers " << model.num_workers() << "\n";
  }
  kolo::shutdown();
  return 0;
}
