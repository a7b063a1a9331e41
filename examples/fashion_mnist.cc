// Fashion-MNIST classification with kolo: the Horovod workflow in C++ with libtorch.
//
//   kolorun -np 2 build/bin/fashion_mnist --epochs 1
//
// Every worker holds a replica of the model and trains on its own shard of the data.
// kolo::DistributedOptimizer averages the gradients across workers, so all replicas take
// the same steps; with N workers an epoch takes 1/N of the steps, and the learning rate
// is scaled by N to make up for the N-times larger global batch (Horovod's recipe).
// Rank 0 prints progress, writes checkpoints (kolo::save_archive: checksummed, atomic) and
// the summary; --resume may restart on a different number of workers. Whatever fails on
// rank 0 alone (an unwritable or damaged checkpoint) fails every rank with the same
// message. This is a starting point to copy, not a benchmark.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "fashion_mnist_model.h"
#include "kolo/elastic.h"
#include "kolo/torch.h"

namespace {

struct Flags {
  int epochs = 10;
  std::int64_t batch_size = 64;  // per worker
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string device = "auto";  // kolo::device(choice): auto, cpu, cuda, cuda:N
  int threads = 1;              // one thread per worker: workers already use the cores
  std::string checkpoint;       // "" = no checkpoints
  bool resume = false;
  std::string summary_json;
  std::uint64_t seed = 42;
  std::int64_t max_steps = 0;  // per epoch; 0 = no limit
  bool progress = false, no_progress = false;
  // --elastic: Horovod's elastic workflow (kolorun --min-np/--max-np): commit every N steps.
  bool elastic = false;
  std::int64_t commit_every = 100;
  std::string elastic_log;       // each worker appends what it trained on here (tests)
  std::int64_t train_limit = 0;  // train on the first N images only (0 = all)
  bool print_steps = false;      // with --elastic: a line per step (bench/elastic_recovery)
};

using kolo_examples::Net;

struct Dataset {
  torch::Tensor images, labels;
};

constexpr std::int64_t kClasses = 10, kImageSide = 28;  // what Net takes and predicts

// The whole split, on `device` (Fashion-MNIST is small enough to live there). Throws,
// naming the file, unless it has at least `min_images` images of the model's size, one
// label each, all of them classes of the model.
Dataset load(const std::string& dir, const std::string& split, std::int64_t min_images,
             const std::string& why, const torch::Device& device) {
  const std::string images = dir + "/" + split + "-images-idx3-ubyte.gz";
  kolo::IdxDataset d =
      kolo::load_idx_dataset(images, dir + "/" + split + "-labels-idx1-ubyte.gz", kClasses);
  const std::int64_t n = d.images.size(0);
  if (d.images.size(2) != kImageSide || d.images.size(3) != kImageSide) {
    throw std::runtime_error(images + ": images of " + std::to_string(d.images.size(2)) + " x " +
                             std::to_string(d.images.size(3)) + " pixels; the model takes " +
                             std::to_string(kImageSide) + " x " + std::to_string(kImageSide) +
                             " (Fashion-MNIST)");
  }
  if (n < min_images) {
    throw std::runtime_error(images + ": " + std::to_string(n) + " images: " + why +
                             "; point --data at a directory with the complete Fashion-MNIST "
                             "files");
  }
  return {d.images.to(device), d.labels.to(device)};
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Writes `path` whole or not at all: a crash mid-write leaves the previous file intact.
template <typename WriteFn>
void write_atomically(const std::string& path, WriteFn write) {
  const std::string tmp = path + ".tmp";
  write(tmp);
  std::filesystem::rename(tmp, path);
}

// Runs `fn` on rank 0 alone and makes its outcome every rank's: if it throws, every rank
// throws its message (`what` says what rank 0 was doing). Otherwise the others would
// fail later with only "rank 0 went away", or wait in their next collective until a
// timeout.
template <typename Fn>
void on_rank0(const std::string& name, const std::string& what, Fn fn) {
  std::string error;  // "" = success
  if (kolo::rank() == 0) {
    try {
      fn();
    } catch (const c10::Error& e) {
      error = e.what_without_backtrace();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = kolo::broadcast_object(error, 0, name);
  if (error.empty()) return;
  throw std::runtime_error(kolo::rank() == 0 ? error : "rank 0 could not " + what + ": " + error);
}

// Rank 0's progress bar on stderr, redrawn in place at most 10 times a second.
class Progress {
 public:
  explicit Progress(bool on) : on_(on) {}
  void update(int epoch, int epochs, std::int64_t step, std::int64_t steps, double loss) {
    if (!on_ || (step < steps && seconds_since(last_) < 0.1)) return;
    last_ = std::chrono::steady_clock::now();
    const int width = 30, done = static_cast<int>(width * step / std::max<std::int64_t>(steps, 1));
    std::fprintf(stderr, "\repoch %d/%d [%s%s] %lld/%lld loss %.4f", epoch, epochs,
                 std::string(done, '=').c_str(), std::string(width - done, ' ').c_str(),
                 static_cast<long long>(step), static_cast<long long>(steps), loss);
  }
  void clear() {
    if (on_) std::fprintf(stderr, "\r%80s\r", "");
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_{};
};

// Accuracy over the whole test set: each rank scores its shard, the counts are summed.
double test_accuracy(Net& model, const Dataset& test) {
  torch::NoGradGuard no_grad;
  model->eval();
  kolo::DistributedSampler sampler(test.labels.size(0), kolo::size(), kolo::rank(),
                                   /*shuffle=*/false, 0, /*drop_last=*/false);
  const torch::Tensor idx =
      torch::tensor(sampler.indices(), torch::kInt64).to(test.labels.device());
  std::int64_t correct = 0;
  for (const torch::Tensor& batch : idx.split(1000)) {
    const torch::Tensor pred = model->forward(test.images.index_select(0, batch)).argmax(1);
    correct += pred.eq(test.labels.index_select(0, batch)).sum().item<std::int64_t>();
  }
  model->train();
  const torch::Tensor total = kolo::allreduce(torch::tensor({correct}, torch::kInt64),
                                              {.name = "test.correct", .op = kolo::ReduceOp::kSum});
  return static_cast<double>(total.item<std::int64_t>()) / static_cast<double>(test.labels.size(0));
}

// One optimizer step on the images `batch` indexes; returns the batch's loss.
double train_step(Net& model, kolo::DistributedOptimizer& optimizer, const Dataset& data,
                  const torch::Tensor& batch) {
  optimizer.zero_grad();
  const torch::Tensor loss = torch::nll_loss(model->forward(data.images.index_select(0, batch)),
                                             data.labels.index_select(0, batch));
  loss.backward();
  optimizer.step();
  return loss.item<double>();
}

void save_checkpoint(const std::string& path, Net& model, torch::optim::Optimizer& optimizer,
                     int epochs_done) {
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
  model->save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("epochs_done", torch::IValue(static_cast<std::int64_t>(epochs_done)));
  kolo::save_archive(archive, path);
}

// Restores the model and optimizer from `path`; returns the number of epochs it had done.
int load_checkpoint(const std::string& path, Net& model, torch::optim::Optimizer& optimizer,
                    const torch::Device& device) {
  torch::serialize::InputArchive archive, model_archive, optimizer_archive;
  // Refuses a damaged file; `device`: saved from whichever device the writer trained on.
  kolo::load_archive(archive, path, device);
  try {
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    model->load(model_archive);
    optimizer.load(optimizer_archive);
    torch::IValue epochs_done;
    archive.read("epochs_done", epochs_done);
    return static_cast<int>(epochs_done.toInt());
  } catch (const c10::Error& e) {
    throw std::runtime_error("checkpoint " + path +
                             " is intact but not this example's model and Adam state (" +
                             e.what_without_backtrace() + ")");
  }
}

int train(const Flags& flags) {
  kolo::init();
  const int rank = kolo::rank(), size = kolo::size();
  torch::manual_seed(flags.seed);  // same initial weights everywhere (broadcast below anyway)
  torch::set_num_threads(flags.threads);

  // --device auto: cuda:<local_rank> where CUDA devices exist (several workers may share
  // one: kolo stages their tensors through host memory), else the CPU.
  const torch::Device device = kolo::device(flags.device);
  if (rank == 0 && device.is_cuda()) std::printf("training on %s\n", device.str().c_str());
  // Every rank loads (and checks) the data itself, so a bad file fails every rank.
  Dataset train_set = load(
      flags.data, "train", size,
      "fewer than the " + std::to_string(size) + " workers, each of which trains on at least one",
      device);
  const Dataset test_set = load(flags.data, "t10k", 1,
                                "the test set is empty, so there is no accuracy to report", device);
  if (flags.train_limit > 0 && flags.train_limit < train_set.labels.size(0)) {
    train_set.images =
        train_set.images.slice(0, 0, std::max<std::int64_t>(flags.train_limit, size));
    train_set.labels =
        train_set.labels.slice(0, 0, std::max<std::int64_t>(flags.train_limit, size));
  }
  Net model;
  model->to(device);
  const double lr = 1e-3 * size;
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(lr));
  kolo::DistributedOptimizer optimizer(adam, model->named_parameters());

  // Rank 0 checks that it can write the checkpoint (now, not after the first epoch) and
  // restores it; the broadcasts below hand it to everyone.
  int start_epoch = 0;
  if (!flags.checkpoint.empty()) {
    on_rank0("checkpoint.start", "use the checkpoint", [&] {
      kolo::check_archive_writable(flags.checkpoint);
      if (flags.resume && std::filesystem::exists(flags.checkpoint)) {
        start_epoch = load_checkpoint(flags.checkpoint, model, adam, device);
      }
    });
  }
  start_epoch = static_cast<int>(
      kolo::broadcast_object(torch::IValue(std::int64_t{start_epoch}), 0, "start_epoch").toInt());
  kolo::broadcast_parameters(model->named_parameters(), 0);
  kolo::broadcast_optimizer_state(adam, 0);
  // The checkpoint carries the old run's learning rate; rescale for this run's workers.
  for (auto& group : adam.param_groups()) {
    static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
  }
  if (rank == 0 && start_epoch > 0) {
    std::printf("resumed from %s at epoch %d\n", flags.checkpoint.c_str(), start_epoch);
  }

  kolo::DistributedSampler sampler(train_set.labels.size(0), size, rank, /*shuffle=*/true,
                                   flags.seed, /*drop_last=*/true);
  Progress progress(rank == 0 && !flags.no_progress && (flags.progress || isatty(2)));
  double accuracy = 0, mean_loss = 0, images_per_sec_sum = 0;
  int epochs_run = 0;
  for (int epoch = start_epoch; epoch < flags.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const torch::Tensor order = torch::tensor(sampler.indices(), torch::kInt64).to(device);
    // Every rank's shard has the same size (drop_last), so ranks run the same step count.
    std::int64_t steps = (order.size(0) + flags.batch_size - 1) / flags.batch_size;
    if (flags.max_steps > 0) steps = std::min(steps, flags.max_steps);

    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    std::int64_t images = 0;
    for (std::int64_t step = 0; step < steps; ++step) {
      const torch::Tensor batch =
          order.slice(0, step * flags.batch_size, (step + 1) * flags.batch_size);
      loss_sum += train_step(model, optimizer, train_set, batch);
      images += batch.size(0);
      progress.update(epoch + 1, flags.epochs, step + 1, steps, loss_sum / (step + 1));
    }
    const double train_seconds = seconds_since(start);
    progress.clear();

    // Sums over ranks: loss of every batch, batches, images.
    const torch::Tensor totals = kolo::allreduce(
        torch::tensor({loss_sum, static_cast<double>(steps), static_cast<double>(images)},
                      torch::kFloat64),
        {.name = "epoch.totals", .op = kolo::ReduceOp::kSum});
    mean_loss = totals[0].item<double>() / std::max(totals[1].item<double>(), 1.0);
    const double images_per_sec = totals[2].item<double>() / train_seconds;
    accuracy = test_accuracy(model, test_set);
    images_per_sec_sum += images_per_sec;
    ++epochs_run;

    if (rank == 0) {
      std::printf("epoch %d/%d train_loss %.4f test_accuracy %.4f images_per_sec %.0f\n", epoch + 1,
                  flags.epochs, mean_loss, accuracy, images_per_sec);
      std::fflush(stdout);
    }
    if (!flags.checkpoint.empty()) {
      on_rank0("checkpoint.save", "save the checkpoint",
               [&] { save_checkpoint(flags.checkpoint, model, adam, epoch + 1); });
    }
  }

  if (rank == 0 && epochs_run == 0) {
    std::printf("nothing to do: %d of %d epochs already done\n", start_epoch, flags.epochs);
  }
  if (rank == 0 && !flags.summary_json.empty() && epochs_run > 0) {
    // A fingerprint of the trained weights: runs that must train alike (the same job
    // started by kolorun, by TF_CONFIG or by torch-style variables) print the same one.
    double parameter_sum = 0;
    for (const auto& p : model->parameters()) parameter_sum += p.abs().sum().item<double>();
    const nlohmann::json summary = {
        {"world_size", size},      {"parameter_sum", parameter_sum},
        {"epochs", flags.epochs},  {"test_accuracy", accuracy},
        {"train_loss", mean_loss}, {"images_per_sec", images_per_sec_sum / epochs_run}};
    write_atomically(flags.summary_json, [&](const std::string& tmp) {
      std::ofstream(tmp) << summary.dump(2) << "\n";
    });
  }
  kolo::shutdown();
  return 0;
}

// --elastic: the same model and data with Horovod's elastic workflow. Workers may leave
// (killed, failed) or join (kolorun's discovery script) at any time: the survivors keep
// their processes, restore the last commit (every --commit-every steps and at each epoch's
// end) and go on; newcomers get the state from a survivor. The learning rate follows the
// number of workers (a reset callback), and the sampler shards the rest of an epoch over
// the workers there are, so that every image of an epoch is trained on exactly once.
//
// --elastic-log PATH (for tests): each worker appends "batch <gen> <commit> <epoch> <images>"
// for every step and "commit <gen> <n>" for every commit to PATH.<worker id>: a step's
// images count as trained on when the commit after it completed in the same generation.
// Also "start pid <pid>" first, "synced <gen> <rank> <size> <parameter checksum>" each
// time training (re)starts after a sync, and "done pid <pid>" at the end.
class ElasticLog {
 public:
  explicit ElasticLog(const std::string& path) {
    if (path.empty()) return;
    const char* id = std::getenv("KOLO_ELASTIC_ID");
    file_ = std::fopen((path + "." + (id ? id : "0")).c_str(), "a");
    if (!file_) throw std::runtime_error("cannot open --elastic-log " + path);
    write("start pid " + std::to_string(getpid()));
  }
  ~ElasticLog() {
    if (file_) std::fclose(file_);
  }
  void batch(std::int64_t commits, std::int64_t epoch, const torch::Tensor& indices) {
    if (!file_) return;
    std::string line = "batch " + std::to_string(kolo::elastic::generation()) + " " +
                       std::to_string(commits) + " " + std::to_string(epoch);
    const torch::Tensor cpu = indices.to(torch::kCPU);
    const auto* p = cpu.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < cpu.numel(); ++i) line += " " + std::to_string(p[i]);
    write(line);
  }
  void synced(Net& model) {
    if (!file_) return;
    double sum = 0;
    for (const auto& p : model->parameters()) sum += p.abs().sum().item<double>();
    char text[64];
    std::snprintf(text, sizeof(text), "%.9g", sum);
    write("synced " + std::to_string(kolo::elastic::generation()) + " " +
          std::to_string(kolo::rank()) + " " + std::to_string(kolo::size()) + " " + text);
  }
  void done() {
    if (file_) write("done pid " + std::to_string(getpid()));
  }
  void commit(std::int64_t commits) {
    if (file_) {
      write("commit " + std::to_string(kolo::elastic::generation()) + " " +
            std::to_string(commits));
    }
  }

 private:
  void write(const std::string& line) {
    std::fprintf(file_, "%s\n", line.c_str());
    std::fflush(file_);
  }
  std::FILE* file_ = nullptr;
};

// Test hook (tests/elastic, mode sync_fail): the worker whose KOLO_ELASTIC_ID is
// FASHION_MNIST_TEST_EXIT_IN_SYNC dies inside its first sync after a reset.
class ExampleState : public kolo::elastic::TorchState {
 public:
  using TorchState::TorchState;

 protected:
  void sync_from(int root) override {
    const char* id = std::getenv("KOLO_ELASTIC_ID");
    const char* victim = std::getenv("FASHION_MNIST_TEST_EXIT_IN_SYNC");
    if (id && victim && std::string(id) == victim && kolo::elastic::generation() > 0) {
      if (FILE* f = std::fopen(log_path.c_str(), "a"))
        std::fprintf(f, "exit in sync\n"), std::fclose(f);
      std::_Exit(1);
    }
    TorchState::sync_from(root);
  }

 public:
  std::string log_path;  // where "exit in sync" goes (the worker's --elastic-log file)
};

int train_elastic(const Flags& flags) {
  kolo::init();
  torch::manual_seed(flags.seed);
  torch::set_num_threads(flags.threads);
  const torch::Device device = kolo::device(flags.device);
  Dataset train_set = load(flags.data, "train", 1, "there is nothing to train on", device),
          test_set = load(flags.data, "t10k", 1,
                          "the test set is empty, so there is no accuracy to report", device);
  if (flags.train_limit > 0 && flags.train_limit < train_set.labels.size(0)) {
    train_set.images = train_set.images.slice(0, 0, flags.train_limit);
    train_set.labels = train_set.labels.slice(0, 0, flags.train_limit);
  }
  Net model;
  model->to(device);
  const double base_lr = 1e-3;
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(base_lr * kolo::size()));
  // Net has no buffers: the optimizer reduces gradients only, so a rank whose shard is one
  // batch shorter can kolo::join() at the epoch's end while the others take that batch.
  kolo::DistributedOptimizer optimizer(adam, model->named_parameters());
  kolo::ElasticSampler sampler(train_set.labels.size(0), /*shuffle=*/true, flags.seed);
  ExampleState state(*model, adam, {{"epoch", 0}});
  if (const char* id = std::getenv("KOLO_ELASTIC_ID"); id && !flags.elastic_log.empty()) {
    state.log_path = flags.elastic_log + "." + id;
  }
  state.attach(sampler);
  // Scale the learning rate with the workers there are after each reset (newcomers get it
  // from the state they sync).
  state.register_reset_callbacks({[&] {
    for (auto& group : adam.param_groups()) {
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(base_lr * kolo::size());
    }
  }});
  ElasticLog log(flags.elastic_log);
  Progress progress(false);
  double accuracy = 0, mean_loss = 0, images_per_sec = 0;
  const bool trained = kolo::elastic::run(state, [&](kolo::elastic::State&) {
    log.synced(model);
    while (state.value("epoch") < flags.epochs) {
      const std::int64_t epoch = state.value("epoch");
      sampler.set_epoch(epoch);  // resumes the epoch after a reset
      const torch::Tensor order = torch::tensor(sampler.indices(), torch::kInt64).to(device);
      const std::int64_t bs = flags.batch_size;
      const std::int64_t steps = (order.size(0) + bs - 1) / bs;
      const std::int64_t common = sampler.common_batches(bs);
      double loss_sum = 0;
      const auto start = std::chrono::steady_clock::now();
      for (std::int64_t step = 0; step < steps; ++step) {
        const torch::Tensor batch = order.slice(0, step * bs, (step + 1) * bs);
        const double loss = train_step(model, optimizer, train_set, batch);
        sampler.record_batch(batch.size(0));
        log.batch(state.commits(), epoch, batch);
        if (flags.print_steps) {
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
          std::printf("gen %d rank %d size %d step %lld pid %d t_ms %lld\n",
                      kolo::elastic::generation(), kolo::rank(), kolo::size(),
                      static_cast<long long>(step), static_cast<int>(getpid()),
                      static_cast<long long>(ms));
          std::fflush(stdout);
        }
        loss_sum += loss;
        if (step + 1 <= common && (step + 1) % flags.commit_every == 0) {
          state.save();  // commit(), with the log between its two halves
          log.commit(state.commits());
          state.check_host_updates();
        }
      }
      kolo::join();  // shards may differ by one batch
      const double train_seconds = seconds_since(start);
      ++state.value("epoch");
      const torch::Tensor totals = kolo::allreduce(
          torch::tensor({loss_sum, static_cast<double>(steps), static_cast<double>(order.size(0))},
                        torch::kFloat64),
          {.name = "epoch.totals", .op = kolo::ReduceOp::kSum});
      mean_loss = totals[0].item<double>() / std::max(totals[1].item<double>(), 1.0);
      // The images of this pass (after a reset: the rest of the epoch) per second.
      images_per_sec = totals[2].item<double>() / train_seconds;
      accuracy = test_accuracy(model, test_set);
      state.save();
      log.commit(state.commits());
      if (kolo::rank() == 0) {
        std::printf(
            "epoch %lld/%d workers %d train_loss %.4f test_accuracy %.4f images_per_sec %.0f\n",
            static_cast<long long>(epoch + 1), flags.epochs, kolo::size(), mean_loss, accuracy,
            images_per_sec);
        std::fflush(stdout);
      }
      state.check_host_updates();
    }
  });
  if (!trained) {
    std::printf("this worker left the elastic job\n");
    return 0;
  }
  log.done();
  if (kolo::rank() == 0 && !flags.summary_json.empty()) {
    double parameter_sum = 0;
    for (const auto& p : model->parameters()) parameter_sum += p.abs().sum().item<double>();
    const nlohmann::json summary = {
        {"world_size", kolo::size()}, {"parameter_sum", parameter_sum},
        {"epochs", flags.epochs},     {"test_accuracy", accuracy},
        {"train_loss", mean_loss},    {"images_per_sec", images_per_sec}};
    write_atomically(flags.summary_json, [&](const std::string& tmp) {
      std::ofstream(tmp) << summary.dump(2) << "\n";
    });
  }
  kolo::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"Train a small CNN on Fashion-MNIST with kolo (launch with kolorun -np N)"};
  app.add_option("--epochs", flags.epochs, "epochs to train")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--batch-size", flags.batch_size, "images per step per worker")
      ->capture_default_str()
      ->check(CLI::Range(1, 60000));
  app.add_option("--data", flags.data, "directory of the Fashion-MNIST *-ubyte.gz files")
      ->capture_default_str();
  app.add_option("--device", flags.device,
                 "auto (a GPU per worker where CUDA devices exist, else the CPU), cpu, cuda "
                 "(cuda:<local rank>) or cuda:N")
      ->capture_default_str();
  app.add_option("--threads", flags.threads, "torch threads per worker")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--checkpoint", flags.checkpoint,
                 "save model and optimizer here every epoch (checked writable before training)");
  app.add_flag("--resume", flags.resume, "continue from --checkpoint if it exists");
  app.add_option("--summary-json", flags.summary_json, "write the final metrics here as JSON");
  app.add_option("--seed", flags.seed, "seed of the initial weights and the shuffle")
      ->capture_default_str();
  app.add_option("--max-steps", flags.max_steps, "stop each epoch after N steps (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000000));
  app.add_flag("--progress", flags.progress, "show the progress bar even when stderr is no tty");
  app.add_flag("--no-progress", flags.no_progress, "never show the progress bar");
  app.add_flag("--elastic", flags.elastic,
               "elastic training (launch with kolorun --min-np MIN --max-np MAX): workers may "
               "leave and join; see docs/elastic.md");
  app.add_option("--commit-every", flags.commit_every, "with --elastic: commit every N steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000000));
  app.add_option("--elastic-log", flags.elastic_log,
                 "with --elastic: append each step's images and each commit to PATH.<worker id>");
  app.add_flag("--print-steps", flags.print_steps,
               "with --elastic: print 'gen G rank R size S step K pid P t_ms T' after every step "
               "(bench/elastic_recovery.sh reads it)");
  app.add_option("--train-limit", flags.train_limit,
                 "train on the first N training images only (0 = all)")
      ->capture_default_str()
      ->check(CLI::Range(0, 60000));
  CLI11_PARSE(app, argc, argv);
  if (flags.elastic && (flags.max_steps > 0 || !flags.checkpoint.empty())) {
    std::fprintf(stderr,
                 "--elastic trains on every image of each epoch and keeps its state in memory: "
                 "use --train-limit instead of --max-steps, and no --checkpoint\n");
    return 2;
  }
  if (flags.resume && flags.checkpoint.empty()) {
    std::fprintf(stderr, "--resume needs --checkpoint PATH\n");
    return 2;
  }

  // Every rank reports its own failure; kolorun shows which worker said what.
  const auto who = [] {
    return kolo::is_initialized() ? "rank " + std::to_string(kolo::rank()) : std::string("worker");
  };
  try {
    return flags.elastic ? train_elastic(flags) : train(flags);
  } catch (const kolo::Error& e) {
    std::fprintf(stderr, "%s: kolo error (%s): %s\n", who().c_str(),
                 kolo::error_code_name(e.code()), e.what());
  } catch (const c10::Error& e) {  // libtorch's: the message without its C++ backtrace
    std::fprintf(stderr, "%s: error: %s\n", who().c_str(), e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", who().c_str(), e.what());
  }
  return 1;
}
