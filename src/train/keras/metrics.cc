// The metrics of metrics.h and resolve_metric (Keras's compile_utils name rules).
//
// Every metric keeps sums (matches, elements, true positives, ...) rather than averages:
// fit sums the states of replicas and workers and result() divides once, so a metric over
// N replicas equals the metric over their batches taken together. Counts are summed on
// the device in integers and arrive as doubles, exact up to 2^53.
//
// Not for: the loss functions (losses.cc), how fit reduces states (fit's code).
#include "kolo/train/metrics.h"

#include <functional>
#include <utility>
#include <vector>

#include "train/keras/tensor_checks.h"

namespace kolo::train {
namespace {

double ratio(double numerator, double denominator) {
  return denominator > 0 ? numerator / denominator : 0.0;
}

// Adds the element sums of `parts` to state[0..] with one device-to-host copy.
void add_sums(const std::vector<torch::Tensor>& parts, double* state) {
  if (parts.size() == 1) {  // fit's common case: one op and one read instead of four
    state[0] += parts[0].sum(torch::kDouble).item<double>();
    return;
  }
  std::vector<torch::Tensor> sums;
  sums.reserve(parts.size());
  for (const auto& part : parts) sums.push_back(part.sum(torch::kDouble));
  const torch::Tensor host = torch::stack(sums).cpu();
  const double* values = host.data_ptr<double>();
  for (std::size_t i = 0; i < parts.size(); ++i) state[i] += values[i];
}

// state[0] += the number of true elements of `matches`, state[1] += its size.
void add_matches(const torch::Tensor& matches, double* state) {
  if (matches.numel() == 0) return;
  add_sums({matches}, state);
  state[1] += static_cast<double>(matches.numel());
}

void check_k(const std::string& name, int k) {
  if (k < 1) detail::fail(name + ": k " + std::to_string(k) + " must be at least 1");
}

// in_top_k: whether scores[..., label] is finite and fewer than k scores exceed it.
torch::Tensor in_top_k(const torch::Tensor& scores, const torch::Tensor& labels, int k) {
  const torch::Tensor target = scores.gather(-1, labels.unsqueeze(-1));
  const torch::Tensor higher = (scores > target).sum(-1);
  return higher.lt(k).logical_and(torch::isfinite(target.squeeze(-1)));
}

// Which accuracy (or crossentropy) a shape-resolved name means, by tf.keras's rule
// (compile_utils.py): binary when the output's last dimension is 1; sparse when the labels
// have fewer dimensions than the output, or end in 1 while the output does not; else
// categorical. A rank-1 output [batch] is binary here (tf.keras would read the batch
// size as the class count).
enum class Kind { kBinary, kSparse, kCategorical };

Kind resolve_kind(const std::string& name, const torch::Tensor& y_pred,
                  const torch::Tensor& y_true) {
  if (!y_pred.defined() || !y_true.defined() || y_pred.dim() == 0 || y_true.dim() == 0)
    detail::fail("compile(metrics=[\"" + name +
                 "\"]): resolved from the shapes of the output "
                 "and the labels, which must both be [batch, ...]; got y_pred " +
                 detail::shape_text(y_pred) + " and y_true " + detail::shape_text(y_true));
  if (y_pred.dim() == 1 || y_pred.size(-1) == 1) return Kind::kBinary;
  if (y_true.dim() < y_pred.dim() || y_true.size(-1) == 1) return Kind::kSparse;
  return Kind::kCategorical;
}

template <class T, class... Args>
MetricPtr make(Args&&... args) {
  return std::make_shared<T>(std::forward<Args>(args)...);
}

MetricPtr wrap_loss(LossPtr loss, const std::string& name) {
  return std::make_shared<MeanMetricWrapper>(std::move(loss), name);
}

}  // namespace

void Mean::accumulate(const torch::Tensor& y_pred, const torch::Tensor&, double* state) const {
  if (!y_pred.defined()) detail::fail(name_ + ": the values to average are undefined");
  if (y_pred.numel() == 0) return;
  torch::NoGradGuard no_grad;
  add_sums({y_pred.detach()}, state);
  state[1] += static_cast<double>(y_pred.numel());
}

double Mean::result(const double* state) const { return ratio(state[0], state[1]); }

MeanMetricWrapper::MeanMetricWrapper(LossPtr loss, std::string name)
    : loss_(std::move(loss)), name_(std::move(name)) {
  if (!loss_) detail::fail("MeanMetricWrapper \"" + name_ + "\": the loss is null");
  if (name_.empty()) name_ = loss_->name();
}

void MeanMetricWrapper::accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                                   double* state) const {
  torch::NoGradGuard no_grad;
  const torch::Tensor values = loss_->per_example(y_pred.detach(), y_true);
  if (values.numel() == 0) return;
  add_sums({values}, state);
  state[1] += static_cast<double>(values.numel());
}

double MeanMetricWrapper::result(const double* state) const { return ratio(state[0], state[1]); }

void SparseCategoricalAccuracy::accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                                           double* state) const {
  torch::NoGradGuard no_grad;
  const torch::Tensor labels = detail::sparse_labels(name_, y_pred, y_true);
  const torch::Tensor predicted = y_pred.argmax(-1);
  if (!labels.is_floating_point()) {  // integer labels: the same comparison, no casts
    add_matches(predicted.eq(labels.to(predicted.device(), torch::kLong)), state);
    return;
  }
  // Float labels are compared as doubles, as Keras compares labels with the cast argmax.
  const torch::Tensor as_double = predicted.to(torch::kDouble);
  add_matches(as_double.eq(labels.to(as_double.options())), state);
}

double SparseCategoricalAccuracy::result(const double* state) const {
  return ratio(state[0], state[1]);
}

void CategoricalAccuracy::accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                                     double* state) const {
  torch::NoGradGuard no_grad;
  if (!y_pred.defined() || !y_true.defined() || y_pred.dim() < 2 ||
      y_true.sizes() != y_pred.sizes())
    detail::fail_shapes(name_, y_pred, y_true,
                        "do not fit: one-hot labels must have the output's shape [batch, ..., "
                        "classes]; integer class labels go with sparse_categorical_accuracy");
  add_matches(y_pred.argmax(-1).eq(y_true.to(y_pred.device()).argmax(-1)), state);
}

double CategoricalAccuracy::result(const double* state) const { return ratio(state[0], state[1]); }

SparseTopKCategoricalAccuracy::SparseTopKCategoricalAccuracy(std::string name, int k)
    : name_(std::move(name)), k_(k) {
  check_k(name_, k_);
}

void SparseTopKCategoricalAccuracy::accumulate(const torch::Tensor& y_pred,
                                               const torch::Tensor& y_true, double* state) const {
  torch::NoGradGuard no_grad;
  const torch::Tensor labels = detail::class_indices(name_, y_pred, y_true);
  add_matches(in_top_k(y_pred, labels, k_), state);
}

double SparseTopKCategoricalAccuracy::result(const double* state) const {
  return ratio(state[0], state[1]);
}

TopKCategoricalAccuracy::TopKCategoricalAccuracy(std::string name, int k)
    : name_(std::move(name)), k_(k) {
  check_k(name_, k_);
}

void TopKCategoricalAccuracy::accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                                         double* state) const {
  torch::NoGradGuard no_grad;
  if (!y_pred.defined() || !y_true.defined() || y_pred.dim() < 2 ||
      y_true.sizes() != y_pred.sizes())
    detail::fail_shapes(name_, y_pred, y_true,
                        "do not fit: one-hot labels must have the output's shape [batch, ..., "
                        "classes]; integer class labels go with "
                        "sparse_top_k_categorical_accuracy");
  if (y_pred.numel() == 0) return;
  add_matches(in_top_k(y_pred, y_true.to(y_pred.device()).argmax(-1), k_), state);
}

double TopKCategoricalAccuracy::result(const double* state) const {
  return ratio(state[0], state[1]);
}

void BinaryAccuracy::accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                                double* state) const {
  torch::NoGradGuard no_grad;
  const detail::Pair pair = detail::elementwise_pair(name_, y_pred, y_true);
  // Keras compares the label with the thresholded output cast back to a number, so only
  // labels exactly 0 or 1 can match.
  const torch::Tensor predicted = pair.y_pred.gt(threshold_).to(torch::kDouble);
  add_matches(predicted.eq(pair.y_true.to(predicted.options())), state);
}

double BinaryAccuracy::result(const double* state) const { return ratio(state[0], state[1]); }

void Precision::accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                           double* state) const {
  torch::NoGradGuard no_grad;
  const detail::Pair pair = detail::elementwise_pair(name_, y_pred, y_true);
  if (pair.y_pred.numel() == 0) return;
  const torch::Tensor predicted = pair.y_pred.gt(threshold_);
  const torch::Tensor actual = pair.y_true.to(predicted.device()).ne(0);
  add_sums({predicted.logical_and(actual), predicted.logical_and(actual.logical_not())}, state);
}

double Precision::result(const double* state) const { return ratio(state[0], state[0] + state[1]); }

void Recall::accumulate(const torch::Tensor& y_pred, const torch::Tensor& y_true,
                        double* state) const {
  torch::NoGradGuard no_grad;
  const detail::Pair pair = detail::elementwise_pair(name_, y_pred, y_true);
  if (pair.y_pred.numel() == 0) return;
  const torch::Tensor predicted = pair.y_pred.gt(threshold_);
  const torch::Tensor actual = pair.y_true.to(predicted.device()).ne(0);
  add_sums({predicted.logical_and(actual), predicted.logical_not().logical_and(actual)}, state);
}

double Recall::result(const double* state) const { return ratio(state[0], state[0] + state[1]); }

MetricPtr resolve_metric(const MetricSpec& spec, const torch::Tensor& y_pred,
                         const torch::Tensor& y_true) {
  if (const auto* object = std::get_if<MetricPtr>(&spec)) {
    if (!*object) detail::fail("compile(metrics=...): a metric object is null");
    return *object;
  }
  const std::string& name = std::get<std::string>(spec);
  if (name == "accuracy" || name == "acc") {
    switch (resolve_kind(name, y_pred, y_true)) {
      case Kind::kBinary:
        return make<BinaryAccuracy>(name);
      case Kind::kSparse:
        return make<SparseCategoricalAccuracy>(name);
      case Kind::kCategorical:
        return make<CategoricalAccuracy>(name);
    }
  }
  if (name == "crossentropy" || name == "ce") {
    switch (resolve_kind(name, y_pred, y_true)) {
      case Kind::kBinary:
        return wrap_loss(std::make_shared<BinaryCrossentropy>(), name);
      case Kind::kSparse:
        return wrap_loss(std::make_shared<SparseCategoricalCrossentropy>(), name);
      case Kind::kCategorical:
        return wrap_loss(std::make_shared<CategoricalCrossentropy>(), name);
    }
  }
  // Keras's function names show as spelled; class names get the class's default name.
  using Make = std::function<MetricPtr()>;
  const std::vector<std::pair<const char*, Make>> table = {
      {"binary_accuracy", [&] { return make<BinaryAccuracy>(name); }},
      {"BinaryAccuracy", [] { return make<BinaryAccuracy>(); }},
      {"categorical_accuracy", [&] { return make<CategoricalAccuracy>(name); }},
      {"CategoricalAccuracy", [] { return make<CategoricalAccuracy>(); }},
      {"sparse_categorical_accuracy", [&] { return make<SparseCategoricalAccuracy>(name); }},
      {"SparseCategoricalAccuracy", [] { return make<SparseCategoricalAccuracy>(); }},
      {"top_k_categorical_accuracy", [&] { return make<TopKCategoricalAccuracy>(name); }},
      {"TopKCategoricalAccuracy", [] { return make<TopKCategoricalAccuracy>(); }},
      {"sparse_top_k_categorical_accuracy",
       [&] { return make<SparseTopKCategoricalAccuracy>(name); }},
      {"SparseTopKCategoricalAccuracy", [] { return make<SparseTopKCategoricalAccuracy>(); }},
      {"precision", [&] { return make<Precision>(name); }},
      {"Precision", [] { return make<Precision>(); }},
      {"recall", [&] { return make<Recall>(name); }},
      {"Recall", [] { return make<Recall>(); }},
      {"mean_squared_error", [&] { return wrap_loss(std::make_shared<MeanSquaredError>(), name); }},
      {"mse", [&] { return wrap_loss(std::make_shared<MeanSquaredError>(), name); }},
      {"MSE", [&] { return wrap_loss(std::make_shared<MeanSquaredError>(), name); }},
      {"MeanSquaredError", [] { return wrap_loss(std::make_shared<MeanSquaredError>(), ""); }},
      {"mean_absolute_error",
       [&] { return wrap_loss(std::make_shared<MeanAbsoluteError>(), name); }},
      {"mae", [&] { return wrap_loss(std::make_shared<MeanAbsoluteError>(), name); }},
      {"MAE", [&] { return wrap_loss(std::make_shared<MeanAbsoluteError>(), name); }},
      {"MeanAbsoluteError", [] { return wrap_loss(std::make_shared<MeanAbsoluteError>(), ""); }},
      {"binary_crossentropy",
       [&] { return wrap_loss(std::make_shared<BinaryCrossentropy>(), name); }},
      {"BinaryCrossentropy", [] { return wrap_loss(std::make_shared<BinaryCrossentropy>(), ""); }},
      {"categorical_crossentropy",
       [&] { return wrap_loss(std::make_shared<CategoricalCrossentropy>(), name); }},
      {"CategoricalCrossentropy",
       [] { return wrap_loss(std::make_shared<CategoricalCrossentropy>(), ""); }},
      {"sparse_categorical_crossentropy",
       [&] { return wrap_loss(std::make_shared<SparseCategoricalCrossentropy>(), name); }},
      {"SparseCategoricalCrossentropy",
       [] { return wrap_loss(std::make_shared<SparseCategoricalCrossentropy>(), ""); }},
  };
  std::string known = "accuracy, acc, crossentropy, ce";
  for (const auto& [key, create] : table) {
    if (name == key) return create();
    known += ", " + std::string(key);
  }
  detail::fail("compile(metrics=[\"" + name + "\"]): unknown metric; known names: " + known +
               " (or pass a MetricPtr)");
}

}  // namespace kolo::train
