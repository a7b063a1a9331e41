// Metrics of kolo_train (metrics.h): each metric on known inputs, the halves property fit
// relies on (two halves accumulated then read == the whole batch), concurrent
// accumulation, the name rules of resolve_metric with their error messages, and metrics and
// losses on a CUDA device with host labels.
//
// Not for: the losses themselves or resolve_loss (losses_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kolo/train/losses.h"
#include "kolo/train/metrics.h"
#include "train/testing/loss_metric_checks.h"

namespace kolo::train {
namespace {

namespace F = torch::nn::functional;
using namespace testing;  // NOLINT: test helpers

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
