// The losses of losses.h: per-example values with Keras's (tf.keras 2) formulas, epsilon
// and label smoothing, built from differentiable torch ops, and resolve_loss.
//
// Keras computes a per-element loss (shape [batch] for [batch, classes] outputs, [batch,
// steps] for [batch, steps, classes]) and its SUM_OVER_BATCH_SIZE reduction divides by the
// number of elements. per_example averages each example's inner positions, so fit's mean
// over examples equals Keras's mean over elements (all examples have as many positions).
//
// Not for: the reduction over the batch and replicas (fit does it, see losses.h), metrics.
#include "kolo/train/losses.h"

#include <functional>
#include <utility>
#include <vector>

#include "train/keras/tensor_checks.h"

namespace kolo::train {
namespace {

// Keras's backend.epsilon(): probabilities are clipped to [kEpsilon, 1 - kEpsilon].
constexpr double kEpsilon = 1e-7;

// [batch, ...] -> [batch]: the mean over everything but the batch dimension.
torch::Tensor mean_per_example(const torch::Tensor& values) {
  if (values.dim() == 1) return values;
  const torch::Tensor flat = values.flatten(1);
  if (flat.size(1) == 0) return torch::zeros({flat.size(0)}, flat.options());
  return flat.mean(1);
}

void check_smoothing(const std::string& who, double label_smoothing) {
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    detail::fail(who + ": label_smoothing " + std::to_string(label_smoothing) +
                 " is outside [0, 1]; 0 turns smoothing off");
}

// y_pred and y_true of one shape for an element-wise loss, as the compute dtype.
detail::Pair elementwise_floats(const std::string& who, const torch::Tensor& y_pred,
                                const torch::Tensor& y_true) {
  const torch::Tensor scores = detail::float_scores(who, y_pred, y_true, 1, "[batch, ...]");
  detail::Pair pair = detail::elementwise_pair(who, scores, y_true);
  pair.y_true = pair.y_true.to(pair.y_pred.options());
  return pair;
}

}  // namespace

torch::Tensor SparseCategoricalCrossentropy::per_example(const torch::Tensor& y_pred,
                                                         const torch::Tensor& y_true) const {
  const torch::Tensor scores =
      detail::float_scores(name(), y_pred, y_true, 2, "[batch, ..., classes]");
  // On the CPU the label range is checked by gather itself (the clear message is made
  // only when it fails): the explicit check costs 6 small ops on every step of fit.
  const bool cpu = scores.is_cpu();
  const torch::Tensor labels = detail::class_indices(name(), scores, y_true, !cpu);
  // From probabilities Keras takes log(clip(p)) as logits, so the clipped probabilities
  // are renormalised by the softmax (Keras's sparse_softmax_cross_entropy_with_logits).
  const torch::Tensor logits =
      from_logits_ ? scores : torch::log(torch::clamp(scores, kEpsilon, 1 - kEpsilon));
  const torch::Tensor log_probs = torch::log_softmax(logits, -1);
  torch::Tensor picked;
  try {
    picked = log_probs.gather(-1, labels.unsqueeze(-1));
  } catch (const c10::Error&) {
    if (cpu) detail::class_indices(name(), scores, y_true, true);  // throws the clear error
    throw;
  }
  return mean_per_example(-picked.squeeze(-1));
}

torch::Tensor CategoricalCrossentropy::per_example(const torch::Tensor& y_pred,
                                                   const torch::Tensor& y_true) const {
  check_smoothing(name(), label_smoothing_);
  const torch::Tensor scores =
      detail::float_scores(name(), y_pred, y_true, 2, "[batch, ..., classes]");
  if (y_true.sizes() != scores.sizes())
    detail::fail_shapes(name(), y_pred, y_true,
                        "do not fit: labels must be one-hot (or soft) with the output's shape; "
                        "integer class labels go with sparse_categorical_crossentropy");
  torch::Tensor target = y_true.to(scores.options());
  if (label_smoothing_ > 0) {
    const double classes = static_cast<double>(scores.size(-1));
    target = target * (1 - label_smoothing_) + label_smoothing_ / classes;
  }
  torch::Tensor log_probs;
  if (from_logits_) {
    log_probs = torch::log_softmax(scores, -1);
  } else {
    const torch::Tensor probs = scores / scores.sum(-1, /*keepdim=*/true);
    log_probs = torch::log(torch::clamp(probs, kEpsilon, 1 - kEpsilon));
  }
  return mean_per_example(-(target * log_probs).sum(-1));
}

torch::Tensor BinaryCrossentropy::per_example(const torch::Tensor& y_pred,
                                              const torch::Tensor& y_true) const {
  check_smoothing(name(), label_smoothing_);
  detail::Pair pair = elementwise_floats(name(), y_pred, y_true);
  const torch::Tensor& x = pair.y_pred;
  torch::Tensor target = pair.y_true;
  if (label_smoothing_ > 0) target = target * (1 - label_smoothing_) + 0.5 * label_smoothing_;
  torch::Tensor bce;
  if (from_logits_) {
    // -y log(sigmoid(x)) - (1 - y) log(1 - sigmoid(x)) as max(x, 0) - x y + log(1 +
    // exp(-|x|)), so that exp never overflows (TF's sigmoid_cross_entropy_with_logits).
    // max and -|x| are spelled with where() on x >= 0 so that the gradient at x = 0 is
    // sigmoid(0) - y; relu and abs would both give 0 there.
    const torch::Tensor nonnegative = x >= 0;
    const torch::Tensor relu_x = torch::where(nonnegative, x, torch::zeros_like(x));
    const torch::Tensor minus_abs_x = torch::where(nonnegative, -x, x);
    bce = relu_x - x * target + torch::log1p(torch::exp(minus_abs_x));
  } else {
    // tf.keras 2 adds epsilon inside the logs as well as clipping.
    const torch::Tensor p = torch::clamp(x, kEpsilon, 1 - kEpsilon);
    bce = -(target * torch::log(p + kEpsilon) + (1 - target) * torch::log(1 - p + kEpsilon));
  }
  return mean_per_example(bce);
}

torch::Tensor MeanSquaredError::per_example(const torch::Tensor& y_pred,
                                            const torch::Tensor& y_true) const {
  const detail::Pair pair = elementwise_floats(name(), y_pred, y_true);
  return mean_per_example((pair.y_pred - pair.y_true).square());
}

torch::Tensor MeanAbsoluteError::per_example(const torch::Tensor& y_pred,
                                             const torch::Tensor& y_true) const {
  const detail::Pair pair = elementwise_floats(name(), y_pred, y_true);
  return mean_per_example((pair.y_pred - pair.y_true).abs());
}

LossPtr resolve_loss(const LossSpec& spec) {
  if (const auto* object = std::get_if<LossPtr>(&spec)) {
    if (!*object) detail::fail("compile(loss=...): the loss object is null");
    return *object;
  }
  using Make = std::function<LossPtr()>;
  const Make sparse = [] { return std::make_shared<SparseCategoricalCrossentropy>(); };
  const Make categorical = [] { return std::make_shared<CategoricalCrossentropy>(); };
  const Make binary = [] { return std::make_shared<BinaryCrossentropy>(); };
  const Make mse = [] { return std::make_shared<MeanSquaredError>(); };
  const Make mae = [] { return std::make_shared<MeanAbsoluteError>(); };
  const std::vector<std::pair<const char*, Make>> table = {
      {"sparse_categorical_crossentropy", sparse},
      {"SparseCategoricalCrossentropy", sparse},
      {"categorical_crossentropy", categorical},
      {"CategoricalCrossentropy", categorical},
      {"binary_crossentropy", binary},
      {"BinaryCrossentropy", binary},
      {"mean_squared_error", mse},
      {"mse", mse},
      {"MSE", mse},
      {"MeanSquaredError", mse},
      {"mean_absolute_error", mae},
      {"mae", mae},
      {"MAE", mae},
      {"MeanAbsoluteError", mae},
  };
  const std::string& name = std::get<std::string>(spec);
  std::string known;
  for (const auto& [key, make] : table) {
    if (name == key) return make();
    known += (known.empty() ? "" : ", ") + std::string(key);
  }
  detail::fail("compile(loss=\"" + name + "\"): unknown loss; known names: " + known +
               " (or pass a LossPtr)");
}

}  // namespace kolo::train
