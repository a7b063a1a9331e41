// Metrics for compile(): Keras's classes, and names resolved as Keras resolves them.
// Part of <kolo/train.h>.
//
// A metric is stateless: its state is a few numbers (totals and counts) kept by fit, one
// set per replica, summed over replicas and workers before result() reads it. That makes
// every metric exact across replicas and workers (no average of averages).
//
// Not for: the loss (losses.h); fit tracks it as a Mean of the per-example losses.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <torch/torch.h>

#include "kolo/train/losses.h"

namespace kolo::train {

class Metric {
 public:
  virtual ~Metric() = default;
  // The name in logs and on the progress bar ("accuracy", "precision", ...).
  virtual std::string name() const = 0;
  // How many numbers the state has.
  virtual int state_size() const = 0;
  // Adds one batch (y_pred: the model's output, y_true: the labels, first dimension the
  // batch, possibly 0) to `state` (state_size() numbers). Thread-safe: replicas call it
  // concurrently on their own states. Records no autograd graph; copies the batch's sums
  // to the host (one device synchronisation per call). Throws kolo::Error
  // (kInvalidArgument) naming both shapes when y_pred and y_true do not fit.
  virtual void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                          double* state) const = 0;
  // The value of a (summed) state; 0 when nothing was accumulated, as Keras.
  virtual double result(const double* state) const = 0;
};

using MetricPtr = std::shared_ptr<Metric>;

// A metric in compile(): a name ("accuracy"/"acc", "crossentropy"/"ce", "mse", "mae",
// "precision", "recall", ...) or an object. "accuracy" becomes binary, sparse
// categorical or categorical accuracy from the shapes of the first batch, as Keras does
// (and keeps the name "accuracy"). A name shows as spelled ("acc" shows "acc", "mse"
// shows "mse"); a Keras class name ("BinaryAccuracy") gets the class's default name; an
// object shows its name(). docs/metrics_and_losses.md lists every name.
using MetricSpec = std::variant<std::string, MetricPtr>;

// Resolves `spec` for outputs shaped like `y_pred` and labels like `y_true` (Keras's
// compile_utils rules: binary when y_pred's last dimension is 1 (or y_pred is [batch]);
// else sparse when y_true has fewer dimensions than y_pred or ends in 1; else
// categorical). Throws kolo::Error (kInvalidArgument) naming an unknown metric, a null
// object, or shapes it cannot resolve from. The shapes are read only for "accuracy",
// "acc", "crossentropy" and "ce".
MetricPtr resolve_metric(const MetricSpec& spec, const torch::Tensor& y_pred,
                         const torch::Tensor& y_true);

// The mean of y_pred's elements over every batch (Keras's Mean; y_true unused). fit uses
// it for "loss" with the per-example losses.
class Mean : public Metric {
 public:
  explicit Mean(std::string name = "mean") : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  int state_size() const override { return 2; }  // total, count
  void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                  double* state) const override;
  double result(const double* state) const override;

 private:
  std::string name_;
};

// The mean of a loss's per-example values (Keras's MeanMetricWrapper over a loss
// function): "mse", "mae" and the crossentropy metrics are this over losses.h's classes
// with their defaults. `name` empty: the loss's name(). Throws kolo::Error for a null loss.
class MeanMetricWrapper : public Metric {
 public:
  explicit MeanMetricWrapper(LossPtr loss, std::string name = "");
  std::string name() const override { return name_; }
  int state_size() const override { return 2; }  // total, count
  void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                  double* state) const override;
  double result(const double* state) const override;

 private:
  LossPtr loss_;
  std::string name_;
};

// argmax(y_pred, -1) == y_true (integer class labels; a trailing size-1 dimension of
// y_true is dropped). Outputs [batch, steps, classes] count every step.
class SparseCategoricalAccuracy : public Metric {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy")
      : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  int state_size() const override { return 2; }  // correct, count
  void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                  double* state) const override;
  double result(const double* state) const override;

 private:
  std::string name_;
};

// argmax(y_pred, -1) == argmax(y_true, -1) (one-hot labels).
class CategoricalAccuracy : public Metric {
 public:
  explicit CategoricalAccuracy(std::string name = "categorical_accuracy")
      : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  int state_size() const override { return 2; }
  void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                  double* state) const override;
  double result(const double* state) const override;

 private:
  std::string name_;
};

// Whether the label is among the k highest scores (Keras's in_top_k: classes tied with the
// k-th score count as in the top k; a non-finite score never does). Labels as for
// SparseCategoricalAccuracy; a label outside [0, classes) throws kolo::Error. k >= 1
// (Keras's default 5), else the constructor throws kolo::Error.
class SparseTopKCategoricalAccuracy : public Metric {
 public:
  explicit SparseTopKCategoricalAccuracy(std::string name = "sparse_top_k_categorical_accuracy",
                                         int k = 5);
  std::string name() const override { return name_; }
  int state_size() const override { return 2; }  // correct, count
  void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                  double* state) const override;
  double result(const double* state) const override;

 private:
  std::string name_;
  int k_;
};

// SparseTopKCategoricalAccuracy of argmax(y_true, -1) (one-hot labels).
class TopKCategoricalAccuracy : public Metric {
 public:
  explicit TopKCategoricalAccuracy(std::string name = "top_k_categorical_accuracy", int k = 5);
  std::string name() const override { return name_; }
  int state_size() const override { return 2; }
  void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                  double* state) const override;
  double result(const double* state) const override;

 private:
  std::string name_;
  int k_;
};

// (y_pred > threshold) == y_true, element-wise (default threshold 0.5, as Keras); the
// fraction over all label elements. y_pred [batch, 1] takes labels [batch] or [batch, 1].
class BinaryAccuracy : public Metric {
 public:
  explicit BinaryAccuracy(std::string name = "binary_accuracy", double threshold = 0.5)
      : name_(std::move(name)), threshold_(threshold) {}
  std::string name() const override { return name_; }
  int state_size() const override { return 2; }
  void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                  double* state) const override;
  double result(const double* state) const override;

 private:
  std::string name_;
  double threshold_;
};

// true positives / (true positives + false positives), y_pred > threshold (0.5) counting
// as positive, element-wise over binary labels (Keras's Precision with one threshold; a
// nonzero label is positive). 0 when nothing was predicted positive, as Keras.
class Precision : public Metric {
 public:
  explicit Precision(std::string name = "precision", double threshold = 0.5)
      : name_(std::move(name)), threshold_(threshold) {}
  std::string name() const override { return name_; }
  int state_size() const override { return 2; }  // tp, fp
  void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                  double* state) const override;
  double result(const double* state) const override;

 private:
  std::string name_;
  double threshold_;
};

// true positives / (true positives + false negatives) (Keras's Recall, one threshold);
// 0 when no label was positive, as Keras.
class Recall : public Metric {
 public:
  explicit Recall(std::string name = "recall", double threshold = 0.5)
      : name_(std::move(name)), threshold_(threshold) {}
  std::string name() const override { return name_; }
  int state_size() const override { return 2; }  // tp, fn
  void accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                  double* state) const override;
  double result(const double* state) const override;

 private:
  std::string name_;
  double threshold_;
};

}  // namespace kolo::train
