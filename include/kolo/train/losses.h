// Losses for compile(), with Keras's options and defaults. Part of <kolo/train.h>.
//
// A loss gives per-example values (Keras's reduction NONE); for outputs with more than one
// inner dimension ([batch, steps, classes]) an example's value is the mean over its inner
// positions, so that the mean over the batch is Keras's mean over all positions. Values
// are float32, or float64 for a float64 output; they keep autograd's graph (fit calls
// backward through them). fit reduces them as Keras's
// default SUM_OVER_BATCH_SIZE does under a strategy: the sum over a replica's batch,
// divided by that replica's batch size, times 1/num_replicas_in_sync; the gradients are
// then summed over replicas and workers. (With equal per-replica batches that is the mean
// over the global batch, so N replicas take the same step as one.)
//
// Not for: metrics (metrics.h).
#pragma once

#include <memory>
#include <string>
#include <variant>

#include <torch/torch.h>

namespace kolo::train {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;
  // One value per example: shape [batch] (a batch of 0 gives an empty tensor). Throws
  // kolo::Error (kInvalidArgument) with both shapes when y_pred and y_true do not fit.
  virtual torch::Tensor per_example(const torch::Tensor& y_pred,
                                    const torch::Tensor& y_true) const = 0;
};

using LossPtr = std::shared_ptr<Loss>;

// Integer class labels (y_true [batch] or [batch, 1]) against scores [batch, classes]:
// softmax cross-entropy with from_logits, else y_pred are probabilities (clipped to
// [1e-7, 1 - 1e-7] as Keras's epsilon). Keras's default: from_logits = false.
class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits = false) : from_logits_(from_logits) {}
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  torch::Tensor per_example(const torch::Tensor& y_pred,
                            const torch::Tensor& y_true) const override;

 private:
  bool from_logits_;
};

// One-hot (or soft) labels [batch, classes]; label_smoothing in [0, 1] as Keras (labels
// become y * (1 - s) + s / classes). Probabilities are scaled to sum to 1 over the last
// axis, then clipped to [1e-7, 1 - 1e-7].
class CategoricalCrossentropy : public Loss {
 public:
  explicit CategoricalCrossentropy(bool from_logits = false, double label_smoothing = 0)
      : from_logits_(from_logits), label_smoothing_(label_smoothing) {}
  std::string name() const override { return "categorical_crossentropy"; }
  torch::Tensor per_example(const torch::Tensor& y_pred,
                            const torch::Tensor& y_true) const override;

 private:
  bool from_logits_;
  double label_smoothing_;
};

// Binary labels in {0, 1} (any shape [batch, ...]); the mean over the last axis, as Keras.
// from_logits uses the stable form max(x, 0) - x * y + log(1 + exp(-|x|)); probabilities
// are clipped to [1e-7, 1 - 1e-7]. label_smoothing moves labels towards 0.5.
class BinaryCrossentropy : public Loss {
 public:
  explicit BinaryCrossentropy(bool from_logits = false, double label_smoothing = 0)
      : from_logits_(from_logits), label_smoothing_(label_smoothing) {}
  std::string name() const override { return "binary_crossentropy"; }
  torch::Tensor per_example(const torch::Tensor& y_pred,
                            const torch::Tensor& y_true) const override;

 private:
  bool from_logits_;
  double label_smoothing_;
};

// mean((y_pred - y_true)^2) over the last axis.
class MeanSquaredError : public Loss {
 public:
  std::string name() const override { return "mean_squared_error"; }
  torch::Tensor per_example(const torch::Tensor& y_pred,
                            const torch::Tensor& y_true) const override;
};

// mean(|y_pred - y_true|) over the last axis.
class MeanAbsoluteError : public Loss {
 public:
  std::string name() const override { return "mean_absolute_error"; }
  torch::Tensor per_example(const torch::Tensor& y_pred,
                            const torch::Tensor& y_true) const override;
};

// A loss in compile(): an object, or a Keras name ("sparse_categorical_crossentropy",
// "categorical_crossentropy", "binary_crossentropy", "mse"/"MSE"/"mean_squared_error",
// "mae"/"MAE"/"mean_absolute_error", or a class name such as "BinaryCrossentropy"), which
// gets the defaults above. resolve_loss throws kolo::Error (kInvalidArgument) naming an
// unknown name and listing the known ones, or for a null LossPtr.
using LossSpec = std::variant<std::string, LossPtr>;
LossPtr resolve_loss(const LossSpec& spec);

}  // namespace kolo::train
