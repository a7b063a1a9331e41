// The shape rules and input checks that losses.cc and metrics.cc share: how labels are
// matched to outputs (Keras's squeeze_or_expand_dimensions and sparse-label rules) and
// the kolo::Error messages that name both shapes when they do not fit.
//
// Not for: the losses or metrics themselves, or anything public (this header is private to
// src/train).
#pragma once

#include <string>

#include <torch/torch.h>

namespace kolo::train::detail {

// "[4, 3]", or "undefined" for a tensor that holds nothing.
std::string shape_text(const torch::Tensor& t);

// Throws kolo::Error(kInvalidArgument, message).
[[noreturn]] void fail(const std::string& message);

// Throws kolo::Error(kInvalidArgument): "<who>: y_pred [4, 3] and y_true [4, 2] <what>".
[[noreturn]] void fail_shapes(const std::string& who, const torch::Tensor& y_pred,
                              const torch::Tensor& y_true, const std::string& what);

// y_pred as a floating tensor to compute with: float32 and float64 stay, float16 and
// bfloat16 become float32 (losses are computed in float32 under mixed precision, as
// Keras does); anything else fails. Fails when y_pred is undefined or a scalar, or when
// it has fewer than `min_rank` dimensions (`what_rank` says what the shape should be).
torch::Tensor float_scores(const std::string& who, const torch::Tensor& y_pred,
                           const torch::Tensor& y_true, int64_t min_rank, const char* what_rank);

// For element-wise losses and metrics (binary, regression): a rank-1 y_pred [batch] is
// taken as [batch, 1]; y_true may then be [batch] for a [batch, 1] output or carry a
// trailing 1 the output lacks (Keras's squeeze_or_expand_dimensions). Returns y_pred and
// y_true with one shape; fails naming both shapes when they differ otherwise.
struct Pair {
  torch::Tensor y_pred;
  torch::Tensor y_true;
};
Pair elementwise_pair(const std::string& who, const torch::Tensor& y_pred,
                      const torch::Tensor& y_true);

// Sparse (integer) labels for scores y_pred [batch, ..., classes]: y_true [batch, ...] or
// [batch, ..., 1] (the trailing 1 is dropped). Returns y_true shaped like y_pred without
// its last dimension (dtype unchanged); fails naming both shapes otherwise.
torch::Tensor sparse_labels(const std::string& who, const torch::Tensor& y_pred,
                            const torch::Tensor& y_true);

// sparse_labels as int64 class indices on y_pred's device (floating labels are truncated,
// as Keras's cast does), each checked to lie in [0, classes): one device-to-host copy of
// the smallest and largest label per call.
torch::Tensor class_indices(const std::string& who, const torch::Tensor& y_pred,
                            const torch::Tensor& y_true, bool check_range = true);

}  // namespace kolo::train::detail
