// TensorBoard: event files TensorBoard reads (SummaryWriter) and Keras's TensorBoard
// callback. Part of <kolo/train.h>.
//
// Files: <logdir>/events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2, TFRecord framing
// (length, masked CRC-32C of the length, the Event, masked CRC-32C of it), a first Event
// with file_version "brain.Event:2", scalars as float32. Written by the chief only.
//
// Not for: reading event files (tests have their own reader, independent of this code).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/train/callback.h"

namespace kolo::train {

// CRC-32C (Castagnoli) of `n` bytes, and TFRecord's mask of it.
std::uint32_t crc32c(const void* data, std::size_t n);
std::uint32_t masked_crc32c(const void* data, std::size_t n);

class SummaryWriter {
 public:
  // Creates `logdir` (and parents) and a new event file in it. Throws kolo::Error naming
  // the path when it cannot.
  explicit SummaryWriter(const std::string& logdir);
  ~SummaryWriter();  // flushes and closes
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // wall_time: seconds since the epoch; < 0 means now.
  void add_scalar(const std::string& tag, float value, std::int64_t step, double wall_time = -1);
  // A histogram of `values` (TensorBoard's histogram plugin reads it).
  void add_histogram(const std::string& tag, const std::vector<double>& values, std::int64_t step,
                     double wall_time = -1);
  void flush();
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TensorBoardOptions {
  std::string log_dir = "logs";
  int histogram_freq = 0;  // weight histograms every N epochs; 0: none
  // 0: per epoch (Keras's "epoch"); N: batch scalars ("batch_loss", ...) every N batches.
  int update_freq = 0;
  bool write_steps_per_second = false;
};
// Keras's TensorBoard callback: <log_dir>/train and <log_dir>/validation, epoch scalars
// "epoch_<name>" at step = epoch (validation values without "val_" in validation/),
// "epoch_learning_rate", batch scalars "batch_<name>" at step = iterations, weight
// histograms "<name>/histogram", "evaluation_<name>_vs_iterations" after evaluate.
class TensorBoard : public Callback {
 public:
  explicit TensorBoard(TensorBoardOptions options = {});
  ~TensorBoard() override;
  void on_train_begin(Logs& logs) override;
  void on_train_batch_end(int batch, Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_test_end(Logs& logs) override;
  void on_train_end(Logs& logs) override;

 private:
  TensorBoardOptions o_;
  std::unique_ptr<SummaryWriter> train_, validation_;
  double epoch_start_ = 0;
  std::int64_t epoch_batches_ = 0;
};

}  // namespace kolo::train
