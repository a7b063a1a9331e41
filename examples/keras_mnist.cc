// The second founding program: TensorFlow's strategy + Keras workflow, in C++ on libtorch.
//
//   strategy = tf.distribute.MirroredStrategy()   # or MultiWorkerMirroredStrategy() + TF_CONFIG
//   with strategy.scope():
//       model = Sequential([Dense(64, relu, input_shape=(784,)), Dense(10)])
//       model.compile(optimizer=Adam(), loss=SparseCategoricalCrossentropy(from_logits=True),
//                     metrics=['accuracy'])
//   model.fit(x_train / 255, y_train, epochs=5)
// (Dataset::from_idx already scales the images to [0, 1]: the / 255 is done.)
//
// Run it (README, "The TensorFlow way"):
//   build/bin/keras_mnist                                          one process, one replica
//   build/bin/keras_mnist --strategy mirrored --devices cpu:0,cpu:1    2 replicas, 1 process
//   build/bin/kolorun -np 2 build/bin/keras_mnist --strategy multiworker
//   TF_CONFIG='{"cluster":{"worker":["localhost:12345","localhost:23456"]},
//              "task":{"type":"worker","index":0}}' build/bin/keras_mnist --strategy multiworker
//   (and index 1 in a second shell)
//   build/bin/kolorun -np 2 build/bin/keras_mnist --strategy horovod
//   build/bin/kolorun --ps 2 -np 2 build/bin/keras_mnist --strategy parameter_server
//   build/bin/kolorun --min-np 1 --max-np 3 build/bin/keras_mnist --strategy multiworker --elastic
//   (elastic: workers may fail or join while fit goes on; docs/elastic.md)
// For fault-injection tests: --pause-at 3:50 --pause-marker FILE makes worker 1 stop in
// epoch 3 after 50 of its batches, write its pid to FILE and wait to be killed.
// --batch-size is GLOBAL (over every replica of every worker), as in Keras.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <unistd.h>

#include "kolo/torch.h"
#include "kolo/train.h"

namespace kt = kolo::train;

namespace {

struct Flags {
  std::string strategy = "default";
  std::string devices;  // comma-separated, for mirrored and multiworker
  int epochs = 5;
  std::int64_t batch_size = 32;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string logdir, backup_dir, checkpoint, summary_json;
  std::int64_t steps_per_epoch = -1;
  int verbose = 1;
  double learning_rate = 0.001;
  int warmup_epochs = 0;
  std::uint64_t seed = 42;
  int threads = 0;       // 0: libtorch's default (the strategy shares cores among replicas)
  bool elastic = false;  // FitOptions::elastic (multiworker or horovod, kolorun --min-np)
  std::int64_t commit_every = 100;
  // Fault injection (tests): "EPOCH:STEP", the worker, the marker file, the longest wait.
  std::string pause_at, pause_marker;
  int pause_epoch = -1;  // from pause_at, 0-based; -1: no pause
  std::int64_t pause_step = 0;
  int pause_worker = 1;
  int pause_seconds = 300;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

kt::Strategy make_strategy(const Flags& f) {
  if (f.strategy == "default") return kt::Strategy();
  if (f.strategy == "mirrored") return kt::MirroredStrategy(split(f.devices));
  if (f.strategy == "multiworker") return kt::MultiWorkerMirroredStrategy({}, split(f.devices));
  return kt::HorovodStrategy();
}

// Times the training batches only (not validation, not start-up).
struct Throughput : kt::Callback {
  std::chrono::steady_clock::time_point start;
  double seconds = 0;
  void on_epoch_begin(int, kt::Logs&) override { start = std::chrono::steady_clock::now(); }
  void on_epoch_end(int, kt::Logs&) override {
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

// For fault-injection tests (--pause-at): the chosen worker, before batch `step` (0-based:
// after `step` batches) of epoch `epoch` (0-based), writes its pid to `marker` (a
// temporary file renamed into place, so a reader never sees it half-written), says so on
// stdout and sleeps until it is killed; after `max_seconds` it exits with status 3, so
// nothing hangs when no test kills it. The other workers wait for it in their next
// collective. It changes nothing else: a run that does not reach the point trains as one
// without the option.
struct PauseAt : kt::Callback {
  int worker = 1, epoch = 0;
  std::int64_t step = 0;
  std::string marker;
  int max_seconds = 300;
  bool here = false;  // this process is the chosen worker
  int current_epoch = -1;

  void on_epoch_begin(int e, kt::Logs&) override { current_epoch = e; }
  void on_train_batch_begin(int batch, kt::Logs&) override {
    if (!here || current_epoch != epoch || batch != step) return;
    const long pid = static_cast<long>(::getpid());
    { std::ofstream(marker + ".tmp") << pid << "\n"; }
    if (std::rename((marker + ".tmp").c_str(), marker.c_str()) != 0) {
      std::fprintf(stderr, "keras_mnist: --pause-marker: cannot write %s\n", marker.c_str());
      std::fflush(nullptr);
      std::_Exit(3);
    }
    std::printf(
        "keras_mnist: worker %d (pid %ld) paused in epoch %d after %lld batches; "
        "marker %s; waiting to be killed (at most %d s)\n",
        worker, pid, epoch + 1, static_cast<long long>(step), marker.c_str(), max_seconds);
    std::fflush(nullptr);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(max_seconds);
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::fprintf(stderr,
                 "keras_mnist: --pause-at: worker %d was not killed within %d s of pausing; "
                 "exiting with status 3\n",
                 worker, max_seconds);
    std::fflush(nullptr);
    std::_Exit(3);  // not exit(): no destructors that would wait for the other workers
  }
};

// "EPOCH:STEP" (EPOCH from 1, as "Epoch 3/5" counts; STEP batches done in it, from 0)
// into a 0-based epoch and STEP.
bool parse_pause_at(const std::string& text, int& epoch, std::int64_t& step) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return false;
  try {
    std::size_t n1 = 0, n2 = 0;
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    epoch = std::stoi(a, &n1);
    step = std::stoll(b, &n2);
    if (n1 != a.size() || n2 != b.size() || epoch < 1 || step < 0) return false;
    epoch -= 1;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

int run(const Flags& f) {
  if (f.threads > 0) torch::set_num_threads(f.threads);
  std::optional<kt::ParameterServerStrategy> pss;
  if (f.strategy == "parameter_server") {
    // TensorFlow's advice: MinSizePartitioner with max_shards = the number of ps tasks
    // (here with 64 KiB shards, so that the first layer's 200 KB spreads over them).
    const kt::ClusterResolver cluster = kt::ClusterResolver::from_tf_config();
    const int num_ps = static_cast<int>(cluster.cluster_spec().ps.size());
    pss.emplace(cluster, kt::VariablePartitioner::min_size(64 << 10, num_ps));
  }
  kt::Strategy strategy = pss ? kt::Strategy(*pss) : make_strategy(f);
  torch::manual_seed(f.seed);
  kt::Model model(kt::Sequential({kt::Dense(64, "relu", 784), kt::Dense(10)}), strategy);
  model.compile(kt::Adam{.learning_rate = f.learning_rate},
                std::make_shared<kt::SparseCategoricalCrossentropy>(/*from_logits=*/true),
                {"accuracy"});

  const kt::Dataset train = kt::Dataset::from_idx(f.data + "/train-images-idx3-ubyte.gz",
                                                  f.data + "/train-labels-idx1-ubyte.gz");
  const kt::Dataset test = kt::Dataset::from_idx(f.data + "/t10k-images-idx3-ubyte.gz",
                                                 f.data + "/t10k-labels-idx1-ubyte.gz");
  auto throughput = std::make_shared<Throughput>();
  kt::FitOptions fit{.epochs = f.epochs, .batch_size = f.batch_size, .verbose = f.verbose};
  fit.seed = f.seed;
  fit.steps_per_epoch = f.steps_per_epoch;
  const bool ps = f.strategy == "parameter_server";
  // Parameter servers: an epoch is a number of steps (one worker's batch each); by default
  // as many as make one pass over the data.
  if (ps && fit.steps_per_epoch <= 0) fit.steps_per_epoch = train.size() / f.batch_size;
  fit.callbacks.push_back(throughput);
  fit.elastic = {.enabled = f.elastic, .commit_every = f.commit_every};
  if (!f.backup_dir.empty()) {
    fit.callbacks.push_back(std::make_shared<kt::BackupAndRestore>(
        kt::BackupAndRestoreOptions{.backup_dir = f.backup_dir}));
  }
  if (!f.checkpoint.empty()) {
    fit.callbacks.push_back(std::make_shared<kt::ModelCheckpoint>(
        kt::ModelCheckpointOptions{.filepath = f.checkpoint, .monitor = "loss"}));
  }
  if (!f.logdir.empty()) {
    fit.callbacks.push_back(
        std::make_shared<kt::TensorBoard>(kt::TensorBoardOptions{.log_dir = f.logdir}));
  }
  if (f.warmup_epochs > 0) {
    fit.callbacks.push_back(std::make_shared<kt::LearningRateWarmup>(kt::LearningRateWarmupOptions{
        .initial_lr = f.learning_rate, .warmup_epochs = f.warmup_epochs}));
  }
  if (f.pause_epoch >= 0) {
    auto pause = std::make_shared<PauseAt>();
    pause->worker = f.pause_worker;
    pause->epoch = f.pause_epoch;
    pause->step = f.pause_step;
    pause->marker = f.pause_marker;
    pause->max_seconds = f.pause_seconds;
    pause->here = strategy.worker_index() == f.pause_worker;
    fit.callbacks.push_back(pause);
  }
  if (pss && pss->task_type() == "evaluator") {
    // TensorFlow's sidecar evaluator: each checkpoint the chief writes, on the test data.
    if (f.checkpoint.empty()) {
      std::fprintf(stderr, "keras_mnist: the evaluator task needs --checkpoint DIR/FILE\n");
      return 2;
    }
    const std::string dir = std::filesystem::path(f.checkpoint).parent_path().string();
    kt::SidecarEvaluator evaluator(model, test,
                                   {.checkpoint_dir = dir.empty() ? "." : dir,
                                    .batch_size = 1000,
                                    .max_evaluations = f.epochs});
    evaluator.start();
    return 0;
  }
  kt::History history = model.fit(train, fit);
  if (ps && !strategy.is_chief()) return 0;  // a worker or ps task: the chief ended the job
  if (!kolo::is_initialized() && f.elastic) {
    std::printf("this worker left the elastic job\n");  // kolorun removed it
    return 0;
  }
  const kt::Logs result = model.evaluate(test, {.batch_size = 1000, .verbose = 0});
  const double accuracy = result.get("accuracy").value_or(0);
  if (strategy.is_chief()) {
    std::printf("test: loss %.4f - accuracy %.4f\n", result.get("loss").value_or(0), accuracy);
    if (!f.summary_json.empty()) {
      const auto& losses = history.history["loss"];
      std::int64_t images = 0;
      for (int e : history.epochs) {
        (void)e;
        images +=
            fit.steps_per_epoch > 0
                ? (ps ? fit.steps_per_epoch * f.batch_size
                      : std::min<std::int64_t>(fit.steps_per_epoch * f.batch_size, train.size()))
                : train.size();
      }
      double parameter_sum = 0;
      for (const auto& p : model.module().parameters())
        parameter_sum += p.abs().sum().item<double>();
      const nlohmann::json summary = {
          {"strategy", f.strategy},
          {"replicas", strategy.num_replicas_in_sync()},
          {"workers", strategy.num_workers()},
          {"epochs", f.epochs},
          {"epochs_run", history.epochs.size()},
          {"first_epoch", history.epochs.empty() ? -1 : history.epochs.front()},
          {"test_accuracy", accuracy},
          {"train_loss", losses.empty() ? 0.0 : losses.back()},
          {"parameter_sum", parameter_sum},
          {"images_per_sec", throughput->seconds > 0 ? images / throughput->seconds : 0.0}};
      const std::string tmp = f.summary_json + ".tmp";
      std::ofstream(tmp) << summary.dump(2) << "\n";
      std::rename(tmp.c_str(), f.summary_json.c_str());
    }
  }
  if (kolo::is_initialized()) kolo::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Fashion-MNIST the TensorFlow way: a strategy, compile and fit (kolo::train)"};
  app.add_option("--strategy", f.strategy,
                 "default, mirrored, multiworker, horovod or parameter_server (TF_CONFIG, or "
                 "kolorun --ps N)")
      ->capture_default_str()
      ->check(CLI::IsMember({"default", "mirrored", "multiworker", "horovod", "parameter_server"}));
  app.add_option("--devices", f.devices,
                 "replicas' devices, e.g. cpu:0,cpu:1 (default: GPUs, else the CPU)");
  app.add_option("--epochs", f.epochs, "epochs")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app.add_option("--batch-size", f.batch_size, "GLOBAL batch size")
      ->capture_default_str()
      ->check(CLI::Range(1, 60000));
  app.add_option("--data", f.data, "directory of the Fashion-MNIST *-ubyte.gz files")
      ->capture_default_str();
  app.add_option("--logdir", f.logdir, "TensorBoard logs here (train/, validation/)");
  app.add_option("--backup-dir", f.backup_dir, "BackupAndRestore: resume here after a crash");
  app.add_option("--checkpoint", f.checkpoint,
                 "ModelCheckpoint file path template, e.g. ckpt-{epoch:02d}");
  app.add_option("--summary-json", f.summary_json, "write the results here (chief)");
  app.add_option("--steps-per-epoch", f.steps_per_epoch, "cap each epoch (-1: the whole data)")
      ->capture_default_str();
  app.add_option("--verbose", f.verbose, "0 silent, 1 progress bar, 2 a line per epoch")
      ->capture_default_str()
      ->check(CLI::Range(0, 2));
  app.add_option("--learning-rate", f.learning_rate, "Adam's learning rate")->capture_default_str();
  app.add_option("--warmup-epochs", f.warmup_epochs,
                 "Horovod's learning-rate warm-up over N epochs")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "initial weights and shuffle")->capture_default_str();
  app.add_option("--threads", f.threads, "torch intra-op threads (0: default)")
      ->capture_default_str();
  app.add_flag("--elastic", f.elastic,
               "elastic fit (multiworker or horovod under kolorun --min-np MIN --max-np MAX): "
               "workers may leave and join; see docs/elastic.md");
  app.add_option("--commit-every", f.commit_every, "with --elastic: commit every N batches")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  const std::string tests = "Fault injection (tests)";
  app.add_option("--pause-at", f.pause_at,
                 "for fault-injection tests: EPOCH:STEP, worker --pause-worker stops in "
                 "epoch EPOCH (from 1, as 'Epoch 3/5') once STEP of its batches are done, "
                 "writes its pid to --pause-marker, prints a line and waits to be killed "
                 "(after --pause-seconds it exits with status 3); training is otherwise "
                 "unchanged")
      ->group(tests);
  app.add_option("--pause-marker", f.pause_marker,
                 "with --pause-at: the file the paused worker writes its pid to")
      ->group(tests);
  app.add_option("--pause-worker", f.pause_worker, "with --pause-at: which worker (rank)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(tests);
  app.add_option("--pause-seconds", f.pause_seconds,
                 "with --pause-at: the longest wait before exiting with status 3")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400))
      ->group(tests);
  CLI11_PARSE(app, argc, argv);
  if (!f.pause_at.empty()) {
    if (!parse_pause_at(f.pause_at, f.pause_epoch, f.pause_step) || f.pause_marker.empty()) {
      std::fprintf(stderr,
                   "keras_mnist: --pause-at needs EPOCH:STEP (EPOCH >= 1, STEP >= 0) and "
                   "--pause-marker FILE\n");
      return 2;
    }
  }
  try {
    return run(f);
  } catch (const kolo::Error& e) {
    std::fprintf(stderr, "keras_mnist: kolo error (%s): %s\n", kolo::error_code_name(e.code()),
                 e.what());
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "keras_mnist: error: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "keras_mnist: error: %s\n", e.what());
  }
  return 1;
}
