// TensorBoard: event files TensorBoard reads (SummaryWriter) and Keras's TensorBoard
// callback. Part of <kolo/train.h>.
//
// Files: <logdir>/events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2 (n: the first number
// not taken), TFRecord framing (length, masked CRC-32C of the length, the Event, masked
// CRC-32C of it), a first Event with file_version "brain.Event:2", scalars as float32
// simple_value, histograms as HistogramProto. Written by the chief only. docs/tensorboard.md.
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

// One event file. Events are buffered (64 KiB) and reach the file at flush(), when the
// buffer fills, and on destruction. Use from one thread at a time.
class SummaryWriter {
 public:
  // Creates `logdir` (and parents) and a new event file in it holding the file_version
  // event. Throws kolo::Error naming the path when it cannot.
  explicit SummaryWriter(const std::string& logdir);
  ~SummaryWriter();  // flushes and closes; a failure is logged, not thrown (call flush())
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // wall_time: seconds since the epoch; < 0 means now. Throws kolo::Error naming the path
  // when the write fails (disk full, ...).
  void add_scalar(const std::string& tag, float value, std::int64_t step, double wall_time = -1);
  // A histogram of `values` over TensorFlow's default buckets (edges +-1e-12 * 1.1^k up
  // to 1e20, then +-DBL_MAX; runs of empty buckets merged). NaN and +-inf are left out;
  // min/max/num/sum/sum_squares are those of the finite values.
  void add_histogram(const std::string& tag, const std::vector<double>& values, std::int64_t step,
                     double wall_time = -1);
  // Writes buffered events to the file. Throws kolo::Error naming the path on failure.
  void flush();
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TensorBoardOptions {
  std::string log_dir = "logs";
  // Weight histograms every N epochs (at epochs 0, N, 2N, ...); 0: none.
  int histogram_freq = 0;
  // 0: per epoch (Keras's "epoch"); N: batch scalars ("batch_loss", ...) after the
  // batches where iterations is a multiple of N.
  int update_freq = 0;
  // "epoch_steps_per_second" (and "batch_steps_per_second" when update_freq > 0).
  bool write_steps_per_second = false;
};
// Keras's TensorBoard callback (docs/tensorboard.md). On the chief only:
// <log_dir>/train gets "epoch_<name>" for each log entry and "epoch_learning_rate" at
// step = epoch, batch scalars "batch_<name>" at step = host().iterations(), weight
// histograms "<name, '.' -> '/'>/histogram" ("fc1.weight" -> "fc1/weight/histogram",
// floating-point weights only) at step = epoch; <log_dir>/validation (made when first
// needed) gets the "val_" entries as "epoch_<name without val_>" and, at every
// on_test_end (fit's validation too, as Keras), "evaluation_<name>_vs_iterations" at
// step = iterations. Files are flushed at each epoch's and each evaluation's end and
// closed at on_train_end. Throws kolo::Error naming the path when a write fails.
class TensorBoard : public Callback {
 public:
  explicit TensorBoard(TensorBoardOptions options = {});
  ~TensorBoard() override;
  void on_train_begin(Logs& logs) override;
  void on_train_batch_begin(int batch, Logs& logs) override;
  void on_train_batch_end(int batch, Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_test_end(Logs& logs) override;
  void on_train_end(Logs& logs) override;

 private:
  SummaryWriter& validation_writer();
  void write_histograms(int epoch);

  TensorBoardOptions o_;
  std::unique_ptr<SummaryWriter> train_, validation_;
  double epoch_start_ = 0;  // seconds (steady clock) at on_epoch_begin
  std::int64_t epoch_start_iterations_ = 0;
  double batch_start_ = 0;  // seconds (steady clock) at on_train_batch_begin
};

}  // namespace kolo::train
