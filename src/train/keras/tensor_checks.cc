// Shape rules and input checks shared by the losses and the metrics (tensor_checks.h).
#include "train/keras/tensor_checks.h"

#include <cstdint>
#include <vector>

#include "kolo/error.h"
#include "kolo/types.h"

namespace kolo::train::detail {

std::string shape_text(const torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  return shape_string(t.sizes().vec());
}

void fail(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

void fail_shapes(const std::string& who, const torch::Tensor& y_pred, const torch::Tensor& y_true,
                 const std::string& what) {
  fail(who + ": y_pred " + shape_text(y_pred) + " and y_true " + shape_text(y_true) + " " + what);
}

torch::Tensor float_scores(const std::string& who, const torch::Tensor& y_pred,
                           const torch::Tensor& y_true, int64_t min_rank, const char* what_rank) {
  if (!y_pred.defined() || !y_true.defined())
    fail_shapes(who, y_pred, y_true, "do not fit: both the output and the labels are needed");
  if (y_pred.dim() < min_rank)
    fail_shapes(who, y_pred, y_true, std::string("do not fit: y_pred must be ") + what_rank);
  const auto type = y_pred.scalar_type();
  if (type == torch::kFloat || type == torch::kDouble) return y_pred;
  if (type == torch::kHalf || type == torch::kBFloat16) return y_pred.to(torch::kFloat);
  fail(who + ": y_pred " + shape_text(y_pred) + " has dtype " + std::string(c10::toString(type)) +
       "; the model's output must be floating point (float32, float64, float16 or bfloat16)");
}

Pair elementwise_pair(const std::string& who, const torch::Tensor& y_pred,
                      const torch::Tensor& y_true) {
  if (!y_pred.defined() || !y_true.defined() || y_pred.dim() == 0)
    fail_shapes(who, y_pred, y_true, "do not fit: y_pred must be [batch, ...] with labels");
  torch::Tensor pred = y_pred.dim() == 1 ? y_pred.unsqueeze(-1) : y_pred;
  torch::Tensor truth = y_true;
  if (truth.dim() == pred.dim() - 1 && pred.size(-1) == 1) {
    truth = truth.unsqueeze(-1);
  } else if (truth.dim() == 1 && pred.dim() == 2 && truth.size(0) == pred.size(0)) {
    // Keras's compile() rule (compile_utils.match_dtype_and_rank): labels [batch] with
    // outputs [batch, n] are labels [batch, 1], which an element-wise loss or metric
    // broadcasts over the n outputs (the parameter-server tutorial's mse on Dense(10)).
    truth = truth.unsqueeze(-1).expand_as(pred);
  } else if (truth.dim() == pred.dim() + 1 && truth.size(-1) == 1) {
    truth = truth.squeeze(-1);
  }
  if (truth.sizes() != pred.sizes())
    fail_shapes(who, y_pred, y_true,
                "do not fit: labels must have the output's shape (a trailing 1 on either side "
                "is allowed)");
  return {pred, truth};
}

torch::Tensor sparse_labels(const std::string& who, const torch::Tensor& y_pred,
                            const torch::Tensor& y_true) {
  if (!y_pred.defined() || !y_true.defined() || y_pred.dim() < 2)
    fail_shapes(who, y_pred, y_true,
                "do not fit: y_pred must be [batch, ..., classes] with integer labels");
  torch::Tensor labels = y_true;
  if (labels.dim() == y_pred.dim() && labels.size(-1) == 1) labels = labels.squeeze(-1);
  if (labels.sizes() != y_pred.sizes().slice(0, y_pred.dim() - 1))
    fail_shapes(who, y_pred, y_true,
                "do not fit: integer class labels must be [batch, ...] or [batch, ..., 1] for "
                "scores [batch, ..., classes]");
  return labels;
}

torch::Tensor class_indices(const std::string& who, const torch::Tensor& y_pred,
                            const torch::Tensor& y_true, bool check_range) {
  const torch::Tensor labels = sparse_labels(who, y_pred, y_true).to(y_pred.device(), torch::kLong);
  if (labels.numel() == 0) return labels;
  const int64_t classes = y_pred.size(-1);
  if (classes == 0)
    fail_shapes(who, y_pred, y_true, "do not fit: y_pred has no classes (its last dimension is 0)");
  if (!check_range) return labels;
  const torch::Tensor bounds = torch::stack({labels.min(), labels.max()}).cpu();
  const int64_t lowest = bounds[0].item<int64_t>();
  const int64_t highest = bounds[1].item<int64_t>();
  if (lowest < 0 || highest >= classes) {
    const int64_t bad = lowest < 0 ? lowest : highest;
    fail(who + ": label " + std::to_string(bad) + " is not a class of y_pred " +
         shape_text(y_pred) + " (classes 0.." + std::to_string(classes - 1) +
         "); sparse labels are class indices (one-hot labels go with the categorical loss or "
         "metric)");
  }
  return labels;
}

}  // namespace kolo::train::detail
