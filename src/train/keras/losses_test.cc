// Losses of kolo_train (losses.h): each loss against a hand formula and against torch's own
// function where the two agree, gradients finite at the edges, from_logits against
// softmax'ed or sigmoid'ed inputs, label smoothing, empty batches, the values' dtypes,
// mismatched shapes, and the name rules of resolve_loss with their error messages.
//
// Not for: metrics, resolve_metric, or losses on a CUDA device (metrics_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kolo/train/losses.h"
#include "train/testing/loss_metric_checks.h"

namespace kolo::train {
namespace {

namespace F = torch::nn::functional;
using namespace testing;  // NOLINT: test helpers

constexpr double kEps = 1e-7;

// The loss's per-example values and whether their gradient with respect to y_pred is
// finite everywhere.
bool gradient_finite(const Loss& loss, torch::Tensor y_pred, const torch::Tensor& y_true) {
  y_pred = y_pred.detach().clone().requires_grad_(true);
  loss.per_example(y_pred, y_true).sum().backward();
  return y_pred.grad().defined() && torch::isfinite(y_pred.grad()).all().item<bool>();
}

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

}  // namespace
}  // namespace kolo::train
