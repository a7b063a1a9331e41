// The TensorBoard callback: what Keras's TensorBoard (tf_keras/callbacks.py) writes, and
// when, onto SummaryWriters for <log_dir>/train and <log_dir>/validation. Only the chief
// writes; every hook on another worker returns at once.
//
// Not for: the bytes of the files (summary.cc, event_encoding.cc), graphs, profiles,
// images or embeddings (docs/tensorboard.md says what differs from Keras).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string_view>

#include "kolo/train/summary.h"

namespace kolo::train {
namespace {

constexpr std::string_view kValidationPrefix = "val_";

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Seconds since `start`, at least a nanosecond (a rate is then always finite).
double elapsed_since(double start) { return std::max(steady_seconds() - start, 1e-9); }

bool is_validation(const std::string& name) { return name.starts_with(kValidationPrefix); }

// libtorch names nest with '.' ("encoder.0.weight"); TensorBoard groups tags by '/', as
// Keras's "dense/kernel_0" groups by layer.
std::string histogram_tag(std::string name) {
  for (char& c : name) {
    if (c == '.') c = '/';
  }
  return name + "/histogram";
}

std::vector<double> to_doubles(const torch::Tensor& t) {
  const torch::Tensor d = t.detach().to(torch::kCPU, torch::kDouble).contiguous();
  const double* p = d.data_ptr<double>();
  return std::vector<double>(p, p + d.numel());
}

}  // namespace

TensorBoard::TensorBoard(TensorBoardOptions options) : o_(std::move(options)) {}
TensorBoard::~TensorBoard() = default;

SummaryWriter& TensorBoard::validation_writer() {
  if (!validation_) {
    validation_ = std::make_unique<SummaryWriter>(
        (std::filesystem::path(o_.log_dir) / "validation").string());
  }
  return *validation_;
}

void TensorBoard::on_train_begin(Logs& /*logs*/) {
  if (!host().is_chief()) return;
  // A new file per fit(): TensorBoard reads every event file of a run directory.
  train_ = std::make_unique<SummaryWriter>((std::filesystem::path(o_.log_dir) / "train").string());
  validation_.reset();
}

void TensorBoard::on_train_batch_begin(int /*batch*/, Logs& /*logs*/) {
  if (o_.write_steps_per_second) batch_start_ = steady_seconds();
}

void TensorBoard::on_train_batch_end(int /*batch*/, Logs& logs) {
  if (o_.update_freq <= 0 || !train_ || !host().is_chief()) return;
  const std::int64_t step = host().iterations();
  if (step % o_.update_freq != 0) return;
  if (o_.write_steps_per_second) {
    train_->add_scalar("batch_steps_per_second", 1.0 / elapsed_since(batch_start_), step);
  }
  for (const auto& [name, value] : logs) {
    train_->add_scalar("batch_" + name, static_cast<float>(value), step);
  }
}

void TensorBoard::on_epoch_begin(int /*epoch*/, Logs& /*logs*/) {
  if (!train_ || !host().is_chief()) return;
  epoch_start_ = steady_seconds();
  epoch_start_iterations_ = host().iterations();
}

void TensorBoard::on_epoch_end(int epoch, Logs& logs) {
  if (!train_ || !host().is_chief()) return;
  if (!logs.empty()) {
    Logs train_logs;
    for (const auto& [name, value] : logs) {
      if (!is_validation(name)) train_logs.set(name, value);
    }
    if (!train_logs.contains("learning_rate")) {
      train_logs.set("learning_rate", host().learning_rate());
    }
    if (o_.write_steps_per_second) {
      const auto steps = static_cast<double>(host().iterations() - epoch_start_iterations_);
      train_logs.set("steps_per_second", steps / elapsed_since(epoch_start_));
    }
    for (const auto& [name, value] : train_logs) {
      train_->add_scalar("epoch_" + name, static_cast<float>(value), epoch);
    }
    for (const auto& [name, value] : logs) {
      if (!is_validation(name)) continue;
      validation_writer().add_scalar("epoch_" + name.substr(kValidationPrefix.size()),
                                     static_cast<float>(value), epoch);
    }
  }
  if (o_.histogram_freq > 0 && epoch % o_.histogram_freq == 0) write_histograms(epoch);
  train_->flush();
  if (validation_) validation_->flush();
}

void TensorBoard::write_histograms(int epoch) {
  for (const auto& [name, weight] : host().get_weights()) {
    // A histogram of a counter (BatchNorm's num_batches_tracked) says nothing.
    if (!weight.defined() || !torch::isFloatingType(weight.scalar_type())) continue;
    train_->add_histogram(histogram_tag(name), to_doubles(weight), epoch);
  }
}

void TensorBoard::on_test_end(Logs& logs) {
  if (!host().is_chief()) return;
  SummaryWriter& writer = validation_writer();
  const std::int64_t step = host().iterations();
  for (const auto& [name, value] : logs) {
    writer.add_scalar("evaluation_" + name + "_vs_iterations", static_cast<float>(value), step);
  }
  writer.flush();
}

void TensorBoard::on_train_end(Logs& /*logs*/) {
  std::unique_ptr<SummaryWriter> train = std::move(train_);
  std::unique_ptr<SummaryWriter> validation = std::move(validation_);
  // Flushed here so that a failed write is thrown; the destructors only log.
  if (train) train->flush();
  if (validation) validation->flush();
}

}  // namespace kolo::train
