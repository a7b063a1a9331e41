// Losses and metrics of kolo_train (losses.h, metrics.h): each loss against a hand formula
// and against torch's own function where the two agree, gradients finite at the edges,
// from_logits against softmax'ed or sigmoid'ed inputs, label smoothing, empty batches;
// each metric on known inputs, the halves property fit relies on (two halves accumulated
// then read == the whole batch), concurrent accumulation, and the name rules of
// resolve_metric / resolve_loss with their error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kolo/error.h"
#include "kolo/train/losses.h"
#include "kolo/train/metrics.h"

namespace kolo::train {
namespace {

namespace F = torch::nn::functional;

constexpr double kEps = 1e-7;

torch::Tensor floats(std::vector<float> v, std::vector<int64_t> shape) {
  return torch::tensor(v, torch::kFloat).reshape(shape);
}

torch::Tensor longs(std::vector<int64_t> v) { return torch::tensor(v, torch::kLong); }

void expect_close(const torch::Tensor& got, const torch::Tensor& want, double tol = 1e-5) {
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(torch::allclose(got.to(torch::kDouble), want.to(torch::kDouble), tol, tol))
      << "got\n"
      << got << "\nwant\n"
      << want;
}

// The error message of `fn`, which must throw kolo::Error(kInvalidArgument).
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no kolo::Error was thrown";
  return "";
}

// The loss's per-example values and whether their gradient with respect to y_pred is
// finite everywhere.
bool gradient_finite(const Loss& loss, torch::Tensor y_pred, const torch::Tensor& y_true) {
  y_pred = y_pred.detach().clone().requires_grad_(true);
  loss.per_example(y_pred, y_true).sum().backward();
  return y_pred.grad().defined() && torch::isfinite(y_pred.grad()).all().item<bool>();
}

// --- losses ---------------------------------------------------------------------------------

TEST(SparseCategoricalCrossentropyTest, MatchesHandFormulaTorchAndItsLogitsForm) {
  {
    SCOPED_TRACE("FromLogitsMatchesHandFormulaAndTorch");
    const auto logits = floats({1, 2, 3, 0.5f, -1, 2, 0, 0, 0}, {3, 3});
    const auto labels = longs({2, 0, 1});
    const auto got = SparseCategoricalCrossentropy(true).per_example(logits, labels);
    // -log softmax(x)[y] = logsumexp(x) - x[y]
    const double row0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
    EXPECT_NEAR(got[0].item<double>(), row0, 1e-5);
    EXPECT_NEAR(got[2].item<double>(), std::log(3.0), 1e-5);
    expect_close(got, F::cross_entropy(logits, labels,
                                       F::CrossEntropyFuncOptions().reduction(torch::kNone)));
  }
  {
    SCOPED_TRACE("ProbabilitiesGiveTheLogitsValue");
    const auto logits = floats({1, 2, 3, 0.5f, -1, 2}, {2, 3});
    const auto labels = longs({2, 1});
    expect_close(
        SparseCategoricalCrossentropy(false).per_example(torch::softmax(logits, -1), labels),
        SparseCategoricalCrossentropy(true).per_example(logits, labels));
  }
  {
    SCOPED_TRACE("LabelsWithATrailingOneOrAsFloats");
    const auto probs = floats({0.2f, 0.8f, 0.6f, 0.4f}, {2, 2});
    const auto want = torch::tensor({-std::log(0.8), -std::log(0.6)}, torch::kDouble);
    const SparseCategoricalCrossentropy loss;
    expect_close(loss.per_example(probs, longs({1, 0})), want);
    expect_close(loss.per_example(probs, longs({1, 0}).reshape({2, 1})), want);
    expect_close(loss.per_example(probs, floats({1, 0}, {2, 1})), want);
  }
  {
    SCOPED_TRACE("SequencesAverageTheirSteps");
    // [batch 2, steps 3, classes 4]: an example's value is the mean over its steps.
    const auto logits = torch::randn({2, 3, 4}, torch::TensorOptions().dtype(torch::kFloat));
    const auto labels = torch::randint(0, 4, {2, 3}, torch::kLong);
    const auto per_step = F::cross_entropy(logits.reshape({6, 4}), labels.reshape({6}),
                                           F::CrossEntropyFuncOptions().reduction(torch::kNone));
    expect_close(SparseCategoricalCrossentropy(true).per_example(logits, labels),
                 per_step.reshape({2, 3}).mean(1));
  }
}

TEST(SparseCategoricalCrossentropyTest, ClipsToEpsilonAndRejectsLabelsOutsideTheClasses) {
  {
    SCOPED_TRACE("ClipsProbabilitiesToEpsilon");
    // p = [1, 0], label 1: clipped to [1 - 1e-7, 1e-7], renormalised by the softmax.
    const auto probs = floats({1, 0}, {1, 2});
    const SparseCategoricalCrossentropy loss;
    EXPECT_NEAR(loss.per_example(probs, longs({1})).item<double>(), -std::log(kEps), 1e-3);
    EXPECT_TRUE(gradient_finite(loss, probs, longs({1})));
    EXPECT_TRUE(gradient_finite(SparseCategoricalCrossentropy(true), floats({1000, -1000}, {1, 2}),
                                longs({1})));
  }
  {
    SCOPED_TRACE("RejectsLabelsOutsideTheClasses");
    const auto msg = error_of([] {
      SparseCategoricalCrossentropy().per_example(torch::full({2, 3}, 1.0 / 3), longs({0, 3}));
    });
    EXPECT_NE(msg.find("label 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  }
}

TEST(CategoricalCrossentropyTest, MatchesTorchScalesProbabilitiesAndSmoothsLabels) {
  {
    SCOPED_TRACE("FromLogitsMatchesTorchWithSoftTargets");
    const auto logits = floats({1, 2, 3, 0.5f, -1, 2}, {2, 3});
    const auto target = floats({0, 0, 1, 0.25f, 0.25f, 0.5f}, {2, 3});
    expect_close(
        CategoricalCrossentropy(true).per_example(logits, target),
        F::cross_entropy(logits, target, F::CrossEntropyFuncOptions().reduction(torch::kNone)));
    expect_close(CategoricalCrossentropy(false).per_example(torch::softmax(logits, -1), target),
                 CategoricalCrossentropy(true).per_example(logits, target));
  }
  {
    SCOPED_TRACE("ScalesProbabilitiesToSumToOne");
    // [2, 6] is taken as [0.25, 0.75].
    const auto got =
        CategoricalCrossentropy().per_example(floats({2, 6}, {1, 2}), floats({0, 1}, {1, 2}));
    EXPECT_NEAR(got.item<double>(), -std::log(0.75), 1e-6);
  }
  {
    SCOPED_TRACE("LabelSmoothingMatchesHandFormulaAndTorch");
    const auto logits = floats({1, 2, 3, 0.5f, -1, 2}, {2, 3});
    const auto labels = longs({2, 0});
    const auto one_hot = F::one_hot(labels, 3).to(torch::kFloat);
    const double s = 0.1;
    const auto got = CategoricalCrossentropy(true, s).per_example(logits, one_hot);
    const auto log_p = torch::log_softmax(logits, -1);
    expect_close(got, -((one_hot * (1 - s) + s / 3) * log_p).sum(-1));
    expect_close(got, F::cross_entropy(
                          logits, labels,
                          F::CrossEntropyFuncOptions().reduction(torch::kNone).label_smoothing(s)));
  }
}

TEST(BinaryCrossentropyTest, ProbabilitiesSmoothingAndLabelShapes) {
  {
    SCOPED_TRACE("ProbabilitiesMatchHandFormulaAndTorch");
    const auto p = floats({0.8f, 0.1f, 0.5f, 0.3f, 0.9f, 0.6f}, {2, 3});
    const auto y = floats({1, 0, 1, 0, 0, 1}, {2, 3});
    const auto got = BinaryCrossentropy().per_example(p, y);
    const double row0 = -(std::log(0.8 + kEps) + std::log(0.9 + kEps) + std::log(0.5 + kEps)) / 3;
    EXPECT_NEAR(got[0].item<double>(), row0, 1e-6);
    expect_close(got, F::binary_cross_entropy(
                          p, y, F::BinaryCrossEntropyFuncOptions().reduction(torch::kNone))
                          .mean(-1));
  }
  {
    SCOPED_TRACE("LabelSmoothingMovesLabelsTowardsAHalf");
    const auto x = floats({1.5f, -0.5f}, {2, 1});
    const auto y = floats({1, 0}, {2, 1});
    const double s = 0.2;
    const auto smoothed = y * (1 - s) + 0.5 * s;  // 0.9, 0.1
    expect_close(BinaryCrossentropy(true, s).per_example(x, y),
                 BinaryCrossentropy(true).per_example(x, smoothed));
    const double p = 1 / (1 + std::exp(-1.5));
    EXPECT_NEAR(BinaryCrossentropy(true, s).per_example(x, y)[0].item<double>(),
                -(0.9 * std::log(p) + 0.1 * std::log(1 - p)), 1e-6);
  }
  {
    SCOPED_TRACE("OneOutputPerExampleTakesFlatOrColumnLabels");
    const auto p = floats({0.8f, 0.3f, 0.6f}, {3, 1});
    const auto y = floats({1, 0, 1}, {3});
    const BinaryCrossentropy loss;
    const auto want = torch::tensor({-std::log(0.8), -std::log(0.7), -std::log(0.6)});
    expect_close(loss.per_example(p, y), want);
    expect_close(loss.per_example(p, y.reshape({3, 1})), want);
    expect_close(loss.per_example(p.reshape({3}), y.reshape({3, 1})), want);
    expect_close(loss.per_example(p.reshape({3}), y), want);
    EXPECT_TRUE(gradient_finite(loss, floats({0, 1, 0.5f}, {3, 1}), y));
  }
}

TEST(BinaryCrossentropyTest, LogitsAreStableMatchTorchAndTheSigmoidForm) {
  {
    SCOPED_TRACE("LogitsAreStableAndMatchTorch");
    const auto x = floats({-100, -2, 0, 3, 100, 0.5f}, {3, 2});
    const auto y = floats({1, 0, 1, 1, 0, 0}, {3, 2});
    const auto got = BinaryCrossentropy(true).per_example(x, y);
    expect_close(got,
                 F::binary_cross_entropy_with_logits(
                     x, y, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone))
                     .mean(-1));
    EXPECT_NEAR(got[0].item<double>(), (100 + std::log1p(std::exp(-2.0))) / 2, 1e-4);
    EXPECT_TRUE(gradient_finite(BinaryCrossentropy(true), x, y));
    // d/dx = (sigmoid(x) - y) / 2 per element (mean over 2), also at x = 0 exactly.
    auto xg = x.clone().requires_grad_(true);
    BinaryCrossentropy(true).per_example(xg, y).sum().backward();
    expect_close(xg.grad(), (torch::sigmoid(x) - y) / 2);
  }
  {
    SCOPED_TRACE("SigmoidInputGivesTheLogitsValue");
    const auto x = floats({-3, -0.5f, 0, 0.7f, 2, 4}, {6, 1});
    const auto y = floats({0, 1, 1, 0, 1, 1}, {6, 1});
    expect_close(BinaryCrossentropy(false).per_example(torch::sigmoid(x), y),
                 BinaryCrossentropy(true).per_example(x, y), 1e-5);
  }
}

TEST(RegressionLossTest, MeanSquaredAndAbsoluteErrorOverTheLastAxis) {
  const auto p = floats({1, 2, 3, 0, -1, 4}, {2, 3});
  const auto y = floats({1, 0, 0, 1, 1, 1}, {2, 3});
  expect_close(MeanSquaredError().per_example(p, y), torch::tensor({13.0 / 3, 14.0 / 3}));
  expect_close(MeanAbsoluteError().per_example(p, y), torch::tensor({5.0 / 3, 6.0 / 3}));
  expect_close(MeanSquaredError().per_example(p, y),
               F::mse_loss(p, y, F::MSELossFuncOptions().reduction(torch::kNone)).mean(-1));
  expect_close(MeanAbsoluteError().per_example(p, y),
               F::l1_loss(p, y, F::L1LossFuncOptions().reduction(torch::kNone)).mean(-1));
  EXPECT_TRUE(gradient_finite(MeanSquaredError(), p, y));
  EXPECT_TRUE(gradient_finite(MeanAbsoluteError(), p, y));
}

// Keras's compile() takes labels [batch] with outputs [batch, n] as [batch, 1] and
// broadcasts (TensorFlow's parameter-server tutorial: mse, Dense(10), y of shape [b]).
TEST(RegressionLossTest, LabelsOfOneValueAnExampleBroadcastOverTheOutputs) {
  const auto p = floats({1, 2, 3, 0, -1, 4}, {2, 3});
  const auto y = floats({1, 2}, {2});
  const auto wide = y.unsqueeze(-1).expand({2, 3});
  expect_close(MeanSquaredError().per_example(p, y), MeanSquaredError().per_example(p, wide));
  expect_close(MeanSquaredError().per_example(p, y), torch::tensor({5.0 / 3, 17.0 / 3}));
  expect_close(MeanAbsoluteError().per_example(p, y), torch::tensor({3.0 / 3, 7.0 / 3}));
  EXPECT_TRUE(gradient_finite(MeanSquaredError(), p, y));
  // Not for other batch sizes: that is a mistake, named.
  const auto wrong = error_of([] {
    MeanSquaredError().per_example(torch::rand({4, 3}), torch::rand({3}));
  });
  EXPECT_NE(wrong.find("[4, 3]"), std::string::npos) << wrong;
}

TEST(LossTest, EmptyBatchesGiveEmptyValuesAndAZeroGradient) {
  const std::vector<std::pair<LossPtr, std::pair<torch::Tensor, torch::Tensor>>> cases = {
      {std::make_shared<SparseCategoricalCrossentropy>(), {torch::ones({0, 4}), longs({})}},
      {std::make_shared<SparseCategoricalCrossentropy>(true), {torch::ones({0, 4}), longs({})}},
      {std::make_shared<CategoricalCrossentropy>(false, 0.1),
       {torch::ones({0, 4}), torch::ones({0, 4})}},
      {std::make_shared<BinaryCrossentropy>(), {torch::ones({0, 1}), torch::ones({0})}},
      {std::make_shared<BinaryCrossentropy>(true), {torch::ones({0}), torch::ones({0})}},
      {std::make_shared<MeanSquaredError>(), {torch::ones({0, 2}), torch::ones({0, 2})}},
      {std::make_shared<MeanAbsoluteError>(), {torch::ones({0}), torch::ones({0, 1})}},
  };
  for (const auto& [loss, inputs] : cases) {
    SCOPED_TRACE(loss->name());
    auto y_pred = inputs.first.clone().requires_grad_(true);
    const auto values = loss->per_example(y_pred, inputs.second);
    EXPECT_EQ(values.sizes(), torch::IntArrayRef({0}));
    const auto total = values.sum();
    EXPECT_EQ(total.item<double>(), 0.0);
    total.backward();
    EXPECT_EQ(y_pred.grad().sizes(), y_pred.sizes());
  }
}

TEST(LossTest, ValuesKeepFloat64AndWidenHalfPrecision) {
  const auto p = floats({0.8f, 0.2f}, {1, 2});
  const auto y = longs({0});
  const SparseCategoricalCrossentropy loss;
  EXPECT_EQ(loss.per_example(p.to(torch::kDouble), y).scalar_type(), torch::kDouble);
  EXPECT_EQ(loss.per_example(p, y).scalar_type(), torch::kFloat);
  const auto half = loss.per_example(p.to(torch::kHalf), y);
  EXPECT_EQ(half.scalar_type(), torch::kFloat);
  EXPECT_NEAR(half.item<double>(), -std::log(0.8), 1e-3);
  EXPECT_EQ(BinaryCrossentropy().per_example(p.to(torch::kBFloat16), p).scalar_type(),
            torch::kFloat);
}

TEST(LossTest, MismatchedShapesNameBothShapes) {
  const auto bce = error_of([] {
    BinaryCrossentropy().per_example(torch::rand({4, 3}), torch::rand({4, 2}));
  });
  EXPECT_NE(bce.find("binary_crossentropy"), std::string::npos) << bce;
  EXPECT_NE(bce.find("[4, 3]"), std::string::npos) << bce;
  EXPECT_NE(bce.find("[4, 2]"), std::string::npos) << bce;
  const auto cce = error_of([] {
    CategoricalCrossentropy().per_example(torch::rand({4, 3}), longs({0, 1, 2, 0}));
  });
  EXPECT_NE(cce.find("[4, 3]"), std::string::npos) << cce;
  EXPECT_NE(cce.find("[4]"), std::string::npos) << cce;
  EXPECT_NE(cce.find("sparse_categorical_crossentropy"), std::string::npos) << cce;
  const auto scce = error_of([] {
    SparseCategoricalCrossentropy().per_example(torch::rand({4, 3}), longs({0, 1}));
  });
  EXPECT_NE(scce.find("[4, 3]"), std::string::npos) << scce;
  EXPECT_NE(scce.find("[2]"), std::string::npos) << scce;
  const auto mse = error_of([] {
    MeanSquaredError().per_example(torch::rand({4, 1}), torch::rand({3, 1}));
  });
  EXPECT_NE(mse.find("[3, 1]"), std::string::npos) << mse;
  const auto ints = error_of([] { MeanSquaredError().per_example(longs({1, 2}), longs({1, 2})); });
  EXPECT_NE(ints.find("floating point"), std::string::npos) << ints;
  const auto smoothing = error_of([] {
    BinaryCrossentropy(false, 1.5).per_example(torch::rand({2, 1}), torch::rand({2, 1}));
  });
  EXPECT_NE(smoothing.find("label_smoothing"), std::string::npos) << smoothing;
}

TEST(ResolveLossTest, KerasNamesAndObjects) {
  EXPECT_EQ(resolve_loss("sparse_categorical_crossentropy")->name(),
            "sparse_categorical_crossentropy");
  EXPECT_EQ(resolve_loss("CategoricalCrossentropy")->name(), "categorical_crossentropy");
  EXPECT_EQ(resolve_loss("binary_crossentropy")->name(), "binary_crossentropy");
  EXPECT_EQ(resolve_loss("mse")->name(), "mean_squared_error");
  EXPECT_EQ(resolve_loss("MAE")->name(), "mean_absolute_error");
  // Names get Keras's defaults: from probabilities.
  const auto p = floats({0.25f, 0.75f}, {1, 2});
  EXPECT_NEAR(
      resolve_loss("sparse_categorical_crossentropy")->per_example(p, longs({1})).item<double>(),
      -std::log(0.75), 1e-6);
  const LossPtr object = std::make_shared<BinaryCrossentropy>(true);
  EXPECT_EQ(resolve_loss(object), object);
  const auto unknown = error_of([] { resolve_loss("hinge_loss"); });
  EXPECT_NE(unknown.find("\"hinge_loss\""), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("binary_crossentropy"), std::string::npos) << unknown;
  error_of([] { resolve_loss(LossPtr()); });
}

// --- metrics --------------------------------------------------------------------------------

double run(const Metric& metric, const torch::Tensor& y_pred, const torch::Tensor& y_true) {
  std::vector<double> state(metric.state_size(), 0.0);
  metric.accumulate(y_pred, y_true, state.data());
  return metric.result(state.data());
}

TEST(MetricTest, MeanAndMeanMetricWrapperRecordNoGraph) {
  {
    SCOPED_TRACE("MeanOfValuesAndZeroWhenEmpty");
    const Mean mean("loss");
    EXPECT_EQ(mean.name(), "loss");
    std::vector<double> state(2, 0.0);
    EXPECT_EQ(mean.result(state.data()), 0.0);
    mean.accumulate(floats({1, 2, 3}, {3}), torch::Tensor(), state.data());
    mean.accumulate(torch::ones({0}), torch::Tensor(), state.data());
    mean.accumulate(floats({6}, {1}), torch::Tensor(), state.data());
    EXPECT_EQ(state[1], 4.0);
    EXPECT_DOUBLE_EQ(mean.result(state.data()), 3.0);
  }
  {
    SCOPED_TRACE("MeanMetricWrapperAveragesTheLoss");
    const auto p = floats({1, 2, 3, 0, -1, 4}, {2, 3});
    const auto y = floats({1, 0, 0, 1, 1, 1}, {2, 3});
    const MeanMetricWrapper mse(std::make_shared<MeanSquaredError>());
    EXPECT_EQ(mse.name(), "mean_squared_error");
    EXPECT_NEAR(run(mse, p, y), 27.0 / 6, 1e-6);
    EXPECT_EQ(MeanMetricWrapper(std::make_shared<MeanSquaredError>(), "mse").name(), "mse");
    error_of([] { MeanMetricWrapper(LossPtr(), "x"); });
  }
  {
    SCOPED_TRACE("AccumulateRecordsNoGraph");
    auto p = floats({0.2f, 0.8f}, {2, 1}).requires_grad_(true);
    const auto y = floats({0, 1}, {2, 1});
    EXPECT_DOUBLE_EQ(run(BinaryAccuracy(), p, y), 1.0);
    EXPECT_NEAR(run(MeanMetricWrapper(std::make_shared<BinaryCrossentropy>()), p, y),
                -std::log(0.8), 1e-6);
    EXPECT_FALSE(p.grad().defined());
  }
}

TEST(MetricTest, AccuraciesOnKnownInputs) {
  {
    SCOPED_TRACE("SparseCategoricalAccuracyOnKnownInputs");
    const auto scores = floats({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f, 0.6f, 0.4f}, {4, 2});
    const SparseCategoricalAccuracy metric;
    EXPECT_DOUBLE_EQ(run(metric, scores, longs({1, 0, 0, 0})), 0.75);
    EXPECT_DOUBLE_EQ(run(metric, scores, longs({1, 0, 0, 0}).reshape({4, 1})), 0.75);
    EXPECT_DOUBLE_EQ(run(metric, scores, floats({1, 0, 1, 0}, {4, 1})), 1.0);
    // A sequence output counts every step.
    EXPECT_DOUBLE_EQ(run(metric, scores.reshape({2, 2, 2}), longs({1, 0, 0, 0}).reshape({2, 2})),
                     0.75);
  }
  {
    SCOPED_TRACE("CategoricalAccuracyOnKnownInputs");
    const auto scores = floats({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
    EXPECT_NEAR(run(CategoricalAccuracy(), scores, floats({0, 1, 0, 1, 0, 1}, {3, 2})), 2.0 / 3,
                1e-15);
  }
  {
    SCOPED_TRACE("BinaryAccuracyThresholdAndShapes");
    const auto p = floats({0.9f, 0.4f, 0.6f, 0.5f}, {4, 1});
    const auto y = floats({1, 0, 0, 1}, {4});
    EXPECT_DOUBLE_EQ(run(BinaryAccuracy(), p, y), 0.5);  // 0.5 is not > 0.5
    EXPECT_DOUBLE_EQ(run(BinaryAccuracy(), p, y.reshape({4, 1})), 0.5);
    EXPECT_DOUBLE_EQ(run(BinaryAccuracy(), p.reshape({4}), y), 0.5);
    EXPECT_DOUBLE_EQ(run(BinaryAccuracy("binary_accuracy", 0.45), p, y), 0.75);
    // Only labels exactly 0 or 1 match.
    EXPECT_DOUBLE_EQ(run(BinaryAccuracy(), floats({0.9f}, {1, 1}), floats({0.9f}, {1, 1})), 0.0);
    // Multi-label outputs: the fraction over all label elements.
    EXPECT_DOUBLE_EQ(run(BinaryAccuracy(), floats({0.9f, 0.1f, 0.7f, 0.8f}, {2, 2}),
                         floats({1, 1, 1, 1}, {2, 2})),
                     0.75);
  }
}

TEST(MetricTest, PrecisionAndRecallOnKnownInputsAndZeroWithoutPositives) {
  const auto p = floats({0.9f, 0.8f, 0.2f, 0.7f, 0.1f}, {5, 1});
  const auto y = floats({1, 0, 1, 1, 0}, {5, 1});
  // predicted positive: 0, 1, 3 (tp 2, fp 1); actual positive: 0, 2, 3 (fn 1).
  EXPECT_NEAR(run(Precision(), p, y), 2.0 / 3, 1e-15);
  EXPECT_NEAR(run(Recall(), p, y), 2.0 / 3, 1e-15);
  EXPECT_DOUBLE_EQ(run(Precision("precision", 0.75), p, y), 0.5);
  EXPECT_DOUBLE_EQ(run(Precision("precision", 0.85), p, y), 1.0);
  EXPECT_DOUBLE_EQ(run(Recall("recall", 0.75), p, y), 1.0 / 3);
  EXPECT_EQ(run(Precision(), floats({0.1f, 0.2f}, {2, 1}), floats({1, 1}, {2, 1})), 0.0);
  EXPECT_EQ(run(Recall(), floats({0.9f, 0.2f}, {2, 1}), floats({0, 0}, {2, 1})), 0.0);
  EXPECT_EQ(run(Precision(), torch::ones({0, 1}), torch::ones({0, 1})), 0.0);
}

TEST(MetricTest, TopKCountsTiesAndNeverNonFiniteScores) {
  const auto scores = floats({0.1f, 0.5f, 0.3f, 0.1f,  //
                              0.4f, 0.4f, 0.4f, 0.1f,  //
                              0.7f, 0.1f, 0.1f, 0.1f,  //
                              NAN, 0.2f, 0.2f, 0.2f},
                             {4, 4});
  const auto labels = longs({2, 2, 3, 0});
  // Row 0: label 2 is second; row 1: tied for first; row 2: tied for second; row 3: NaN.
  EXPECT_DOUBLE_EQ(run(SparseTopKCategoricalAccuracy("top2", 2), scores, labels), 0.75);
  EXPECT_DOUBLE_EQ(run(SparseTopKCategoricalAccuracy("top1", 1), scores, labels), 0.25);
  EXPECT_DOUBLE_EQ(run(SparseTopKCategoricalAccuracy(), scores, labels), 0.75);  // k = 5 > 4
  EXPECT_DOUBLE_EQ(run(TopKCategoricalAccuracy("top2", 2), scores, F::one_hot(labels, 4)), 0.75);
  EXPECT_EQ(SparseTopKCategoricalAccuracy().name(), "sparse_top_k_categorical_accuracy");
  const auto k0 = error_of([] { SparseTopKCategoricalAccuracy("top0", 0); });
  EXPECT_NE(k0.find("top0"), std::string::npos) << k0;
  const auto range = error_of([&] {
    run(SparseTopKCategoricalAccuracy(), scores, longs({0, 1, 2, 4}));
  });
  EXPECT_NE(range.find("label 4"), std::string::npos) << range;
}

// One batch for every metric, split after `split` examples.
struct HalvesCase {
  MetricPtr metric;
  torch::Tensor y_pred;
  torch::Tensor y_true;
};

std::vector<HalvesCase> halves_cases() {
  torch::manual_seed(7);
  const int64_t n = 37;
  const auto scores = torch::softmax(torch::randn({n, 5}), -1);
  const auto labels = torch::randint(0, 5, {n}, torch::kLong);
  const auto one_hot = F::one_hot(labels, 5).to(torch::kFloat);
  const auto prob = torch::rand({n, 1});
  const auto bits = torch::randint(0, 2, {n, 1}).to(torch::kFloat);
  const auto values = torch::randn({n, 3});
  const auto targets = torch::randn({n, 3});
  return {
      {std::make_shared<Mean>(), values.sum(1), torch::Tensor()},
      {std::make_shared<SparseCategoricalAccuracy>(), scores, labels},
      {std::make_shared<CategoricalAccuracy>(), scores, one_hot},
      {std::make_shared<SparseTopKCategoricalAccuracy>("top2", 2), scores, labels},
      {std::make_shared<TopKCategoricalAccuracy>("top3", 3), scores, one_hot},
      {std::make_shared<BinaryAccuracy>(), prob, bits},
      {std::make_shared<Precision>(), prob, bits},
      {std::make_shared<Recall>(), prob, bits},
      {resolve_metric("mse", values, targets), values, targets},
      {resolve_metric("mae", values, targets), values, targets},
      {resolve_metric("crossentropy", scores, labels), scores, labels},
      {resolve_metric("crossentropy", scores, one_hot), scores, one_hot},
      {resolve_metric("crossentropy", prob, bits), prob, bits},
  };
}

TEST(MetricTest, TwoHalvesAccumulatedEqualTheWholeBatch) {
  for (const auto& c : halves_cases()) {
    for (const int64_t split : {int64_t{0}, int64_t{1}, int64_t{18}, c.y_pred.size(0)}) {
      SCOPED_TRACE(c.metric->name() + " split at " + std::to_string(split));
      const auto part = [&](const torch::Tensor& t, int64_t from, int64_t to) {
        return t.defined() ? t.slice(0, from, to) : t;
      };
      const int64_t n = c.y_pred.size(0);
      std::vector<double> whole(c.metric->state_size(), 0.0);
      std::vector<double> halves(c.metric->state_size(), 0.0);
      c.metric->accumulate(c.y_pred, c.y_true, whole.data());
      c.metric->accumulate(part(c.y_pred, 0, split), part(c.y_true, 0, split), halves.data());
      c.metric->accumulate(part(c.y_pred, split, n), part(c.y_true, split, n), halves.data());
      // Counting metrics are exact; means of float values differ by rounding at most.
      EXPECT_DOUBLE_EQ(c.metric->result(halves.data()), c.metric->result(whole.data()));
      if (c.metric->name().find("accuracy") != std::string::npos ||
          c.metric->name().find("top") != std::string::npos) {
        EXPECT_EQ(halves, whole);
      }
    }
  }
}

TEST(MetricTest, ReplicasAccumulateConcurrentlyOnTheirOwnStates) {
  for (const auto& c : halves_cases()) {
    SCOPED_TRACE(c.metric->name());
    std::vector<double> serial(c.metric->state_size(), 0.0);
    c.metric->accumulate(c.y_pred, c.y_true, serial.data());
    std::vector<std::vector<double>> states(4, std::vector<double>(c.metric->state_size(), 0.0));
    std::vector<std::thread> replicas;
    for (auto& state : states)
      replicas.emplace_back([&] {
        for (int i = 0; i < 20; ++i) c.metric->accumulate(c.y_pred, c.y_true, state.data());
      });
    for (auto& t : replicas) t.join();
    for (const auto& state : states)
      EXPECT_DOUBLE_EQ(c.metric->result(state.data()), c.metric->result(serial.data()));
  }
}

TEST(MetricTest, MismatchedShapesNameBothShapes) {
  const auto sparse = error_of([] {
    run(SparseCategoricalAccuracy(), torch::rand({4, 3}), longs({0, 1, 2}));
  });
  EXPECT_NE(sparse.find("sparse_categorical_accuracy"), std::string::npos) << sparse;
  EXPECT_NE(sparse.find("[4, 3]"), std::string::npos) << sparse;
  EXPECT_NE(sparse.find("[3]"), std::string::npos) << sparse;
  const auto cat = error_of([] {
    run(CategoricalAccuracy(), torch::rand({4, 3}), longs({0, 1, 2, 0}));
  });
  EXPECT_NE(cat.find("[4]"), std::string::npos) << cat;
  const auto binary = error_of([] { run(Precision(), torch::rand({4, 2}), torch::rand({4, 3})); });
  EXPECT_NE(binary.find("[4, 2]"), std::string::npos) << binary;
  EXPECT_NE(binary.find("[4, 3]"), std::string::npos) << binary;
}

// --- resolve_metric -------------------------------------------------------------------------

template <class T>
bool is(const MetricPtr& m) {
  return std::dynamic_pointer_cast<T>(m) != nullptr;
}

TEST(ResolveMetricTest, AccuracyAndCrossentropyFollowTheShapes) {
  {
    SCOPED_TRACE("AccuracyFollowsTheShapesAndKeepsItsName");
    const auto acc = [](const char* name, std::vector<int64_t> pred, std::vector<int64_t> truth) {
      return resolve_metric(std::string(name), torch::zeros(pred), torch::zeros(truth));
    };
    EXPECT_TRUE(is<BinaryAccuracy>(acc("accuracy", {8, 1}, {8, 1})));
    EXPECT_TRUE(is<BinaryAccuracy>(acc("accuracy", {8, 1}, {8})));
    EXPECT_TRUE(is<BinaryAccuracy>(acc("accuracy", {8}, {8})));
    EXPECT_TRUE(is<SparseCategoricalAccuracy>(acc("accuracy", {8, 10}, {8})));
    EXPECT_TRUE(is<SparseCategoricalAccuracy>(acc("accuracy", {8, 10}, {8, 1})));
    EXPECT_TRUE(is<SparseCategoricalAccuracy>(acc("accuracy", {8, 5, 10}, {8, 5})));
    EXPECT_TRUE(is<CategoricalAccuracy>(acc("accuracy", {8, 10}, {8, 10})));
    EXPECT_EQ(acc("accuracy", {8, 10}, {8})->name(), "accuracy");
    EXPECT_EQ(acc("acc", {8, 10}, {8, 10})->name(), "acc");
    EXPECT_TRUE(is<CategoricalAccuracy>(acc("acc", {8, 10}, {8, 10})));
    // An empty first batch still has shapes.
    EXPECT_TRUE(is<SparseCategoricalAccuracy>(acc("accuracy", {0, 10}, {0})));
    const auto msg = error_of([] { resolve_metric("accuracy", torch::zeros({4, 2}), {}); });
    EXPECT_NE(msg.find("undefined"), std::string::npos) << msg;
  }
  {
    SCOPED_TRACE("CrossentropyFollowsTheShapes");
    const auto scores = floats({0.25f, 0.75f}, {1, 2});
    const auto ce = resolve_metric("ce", scores, longs({1}));
    EXPECT_EQ(ce->name(), "ce");
    EXPECT_NEAR(run(*ce, scores, longs({1})), -std::log(0.75), 1e-6);
    const auto cat = resolve_metric("crossentropy", scores, floats({0, 1}, {1, 2}));
    EXPECT_EQ(cat->name(), "crossentropy");
    EXPECT_NEAR(run(*cat, scores, floats({0, 1}, {1, 2})), -std::log(0.75), 1e-6);
    const auto bin = resolve_metric("crossentropy", floats({0.75f}, {1, 1}), floats({1}, {1}));
    EXPECT_NEAR(run(*bin, floats({0.75f}, {1, 1}), floats({1}, {1})), -std::log(0.75), 1e-6);
  }
}

TEST(ResolveMetricTest, NamesObjectsAndErrors) {
  {
    SCOPED_TRACE("NamesShowAsSpelledClassesAsTheirDefaults");
    const auto p = torch::zeros({2, 3});
    const auto y = torch::zeros({2, 3});
    EXPECT_EQ(resolve_metric("mse", p, y)->name(), "mse");
    EXPECT_EQ(resolve_metric("mean_squared_error", p, y)->name(), "mean_squared_error");
    EXPECT_EQ(resolve_metric("MeanSquaredError", p, y)->name(), "mean_squared_error");
    EXPECT_EQ(resolve_metric("mae", p, y)->name(), "mae");
    EXPECT_EQ(resolve_metric("BinaryAccuracy", p, y)->name(), "binary_accuracy");
    EXPECT_TRUE(is<Precision>(resolve_metric("precision", p, y)));
    EXPECT_EQ(resolve_metric("Recall", p, y)->name(), "recall");
    EXPECT_TRUE(is<SparseTopKCategoricalAccuracy>(
        resolve_metric("sparse_top_k_categorical_accuracy", p, y)));
    const MetricPtr object = std::make_shared<Precision>("p_at_0.7", 0.7);
    EXPECT_EQ(resolve_metric(object, p, y), object);
    EXPECT_EQ(resolve_metric(object, p, y)->name(), "p_at_0.7");
    // Names that need no shapes resolve without a batch.
    EXPECT_TRUE(is<Recall>(resolve_metric("recall", {}, {})));
  }
  {
    SCOPED_TRACE("UnknownNamesAndNullObjectsAreErrors");
    const auto unknown = error_of([] { resolve_metric("f1", torch::zeros({1, 1}), {}); });
    EXPECT_NE(unknown.find("\"f1\""), std::string::npos) << unknown;
    EXPECT_NE(unknown.find("accuracy"), std::string::npos) << unknown;
    const auto null = error_of([] { resolve_metric(MetricPtr(), {}, {}); });
    EXPECT_NE(null.find("null"), std::string::npos) << null;
  }
}

// --- devices --------------------------------------------------------------------------------

TEST(DeviceTest, CudaOutputsWithHostLabelsMatchTheHost) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device in this libtorch";
  const torch::Device cuda(torch::kCUDA, 0);
  for (const auto& c : halves_cases()) {
    SCOPED_TRACE(c.metric->name());
    std::vector<double> host(c.metric->state_size(), 0.0);
    std::vector<double> device(c.metric->state_size(), 0.0);
    c.metric->accumulate(c.y_pred, c.y_true, host.data());
    c.metric->accumulate(c.y_pred.to(cuda), c.y_true, device.data());
    EXPECT_NEAR(c.metric->result(device.data()), c.metric->result(host.data()), 1e-6);
  }
  const auto logits = floats({1, 2, 3, 0.5f, -1, 2}, {2, 3});
  const auto labels = longs({2, 1});
  expect_close(SparseCategoricalCrossentropy(true).per_example(logits.to(cuda), labels).cpu(),
               SparseCategoricalCrossentropy(true).per_example(logits, labels));
  expect_close(BinaryCrossentropy(true).per_example(logits.to(cuda), torch::ones({2, 3})).cpu(),
               BinaryCrossentropy(true).per_example(logits, torch::ones({2, 3})));
}

}  // namespace
}  // namespace kolo::train
