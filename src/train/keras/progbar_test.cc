// Tests of the progress bar: the exact text of tf.keras 2's Progbar for each format
// (expected strings were produced by Keras's own Progbar.update logic driven with the
// same clock readings), and ProgbarLogger's rules for when bars start, what they show
// and where (Epoch headers, evaluate/predict, unknown steps, chief only, terminal).
#include "kolo/train/progbar.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "train/keras/progbar_format.h"

namespace kolo::train {
namespace {

using internal::format_eta;
using internal::format_per_unit;
using internal::format_value;
using internal::Progbar;
using internal::ProgbarFormat;

ProgbarFormat fmt(std::int64_t target, int verbose = 1, bool dynamic = true) {
  ProgbarFormat f;
  f.target = target;
  f.verbose = verbose;
  f.dynamic = dynamic;
  return f;
}

TEST(ProgbarText, RedrawnBarWithEtaPaddingSmallValuesAndTheFinalLine) {
  Progbar p(fmt(10), 0.0);
  EXPECT_EQ(p.update(1, {{"loss", 2.5}}, false, 1.0),
            "\r 1/10 [==>...........................] - ETA: 9s - loss: 2.5000");
  EXPECT_EQ(p.update(2, {{"loss", 1.0}}, false, 1.01), "");  // within 0.05 s of the last
  // The first step (1 s) is left out of the estimate: (3 - 1) s / 4 steps.
  EXPECT_EQ(p.update(5, {{"loss", 0.5}}, false, 3.0),
            "\r 5/10 [==============>...............] - ETA: 2s - loss: 0.5000");
  EXPECT_EQ(p.update(6, {{"loss", 0.0005}}, false, 3.5),
            "\r 6/10 [=================>............] - ETA: 2s - loss: 5.0000e-04");
  // Shorter than the last: blanks over the rest of it.
  EXPECT_EQ(p.update(7, {{"loss", 0.25}}, false, 4.0),
            "\r 7/10 [====================>.........] - ETA: 1s - loss: 0.2500    ");
  EXPECT_EQ(p.update(10, {{"loss", 0.2}, {"accuracy", 0.9}}, true, 5.5),
            "\r10/10 [==============================] - 6s 500ms/step - loss: 0.2000 - accuracy: "
            "0.9000\n");
}

TEST(ProgbarText, HoursOfEtaSecondsPerStepAndAWideCount) {
  Progbar p(fmt(100000), 0.0);
  EXPECT_EQ(p.update(1, {{"loss", 1.0}}, false, 2.0),
            "\r     1/100000 [..............................] - ETA: 55:33:18 - loss: 1.0000");
  EXPECT_EQ(p.update(2, {{"loss", 1.0}}, false, 4.0),
            "\r     2/100000 [..............................] - ETA: 55:33:16 - loss: 1.0000");
  EXPECT_EQ(p.update(3, {{"loss", 1.0}}, false, 4.1),
            "\r     3/100000 [..............................] - ETA: 29:09:56 - loss: 1.0000");
  EXPECT_EQ(p.update(99999, {{"loss", 1.0}}, false, 70000.0),
            "\r 99999/100000 [============================>.] - ETA: 0s - loss: 1.0000      ");
  EXPECT_EQ(
      p.update(100000, {{"loss", 1.0}}, true, 70000.5),
      "\r100000/100000 [==============================] - 70000s 700ms/step - loss: 1.0000\n");
}

TEST(ProgbarText, MicrosecondsNanAndNegativeValues) {
  Progbar p(fmt(3), 0.0);
  EXPECT_EQ(p.update(1, {{"loss", 1e-4}}, false, 0.06),
            "\r1/3 [=========>....................] - ETA: 0s - loss: 1.0000e-04");
  EXPECT_EQ(p.update(2, {{"loss", NAN}}, false, 0.12),
            "\r2/3 [===================>..........] - ETA: 0s - loss: nan       ");
  EXPECT_EQ(p.update(3, {{"loss", -0.5}}, true, 0.1225),
            "\r3/3 [==============================] - 0s 31ms/step - loss: -0.5000\n");
  Progbar fast(fmt(2), 0.0);
  EXPECT_EQ(fast.update(2, {}, true, 0.0005),
            "\r2/2 [==============================] - 0s 250us/step\n");
}

TEST(ProgbarText, UnknownTargetShowsTheCountAndTheTimeSoFar) {
  Progbar p(fmt(-1), 0.0);
  EXPECT_EQ(p.update(1, {{"loss", 0.5}}, false, 0.5),
            "\r      1/Unknown - 0s 500ms/step - loss: 0.5000");
  EXPECT_EQ(p.update(3, {{"loss", 0.3}}, false, 2.0),
            "\r      3/Unknown - 2s 750ms/step - loss: 0.3000");
}

TEST(ProgbarText, ValuesThatAreNotStatefulAreAveragedOverSteps) {
  ProgbarFormat f = fmt(4);
  f.stateful = std::set<std::string>{};
  Progbar p(f, 0.0);
  EXPECT_EQ(p.update(1, {{"loss", 4.0}}, false, 1.0),
            "\r1/4 [======>.......................] - ETA: 3s - loss: 4.0000");
  // (4 x 1 + 1 x 2) / 3 steps.
  EXPECT_EQ(p.update(3, {{"loss", 1.0}}, false, 2.0),
            "\r3/4 [=====================>........] - ETA: 0s - loss: 2.0000");
  EXPECT_EQ(p.update(4, {{"loss", 0.5}}, true, 2.5),
            "\r4/4 [==============================] - 2s 500ms/step - loss: 1.6250\n");
  f.verbose = 2;
  Progbar two(f, 0.0);
  EXPECT_EQ(two.update(1, {{"loss", 4.0}}, false, 1.0), "");
  EXPECT_EQ(two.update(3, {{"loss", 1.0}}, false, 2.0), "");
  EXPECT_EQ(two.update(4, {{"loss", 0.5}}, true, 2.5),
            "4/4 - 2s - loss: 1.6250 - 2s/epoch - 625ms/step\n");
}

TEST(ProgbarText, VerboseTwoIsOneLineWithEpochAndStepTimes) {
  Progbar p(fmt(10, 2), 0.0);
  EXPECT_EQ(p.update(5, {{"loss", 0.3}}, false, 2.0), "");
  // Keras's verbose-2 rule for "%.4e" is value <= 1e-3, so negative values take it.
  EXPECT_EQ(p.update(10, {{"loss", 0.2}, {"accuracy", -0.5}}, true, 5.5),
            "10/10 - 6s - loss: 0.2000 - accuracy: -5.0000e-01 - 6s/epoch - 550ms/step\n");
}

TEST(ProgbarText, WholeLinesEndInANewlineAndWaitAFullInterval) {
  ProgbarFormat f = fmt(3, 1, /*dynamic=*/false);
  f.interval = 0.05;
  Progbar p(f, 0.0);
  EXPECT_EQ(p.update(1, {{"loss", 1.0}}, false, 0.04), "");  // not yet 0.05 s in
  EXPECT_EQ(p.update(2, {{"loss", 1.0}}, false, 0.12),
            "2/3 [===================>..........] - ETA: 0s - loss: 1.0000\n");
  EXPECT_EQ(p.update(3, {{"loss", 1.0}}, true, 0.2),
            "3/3 [==============================] - 0s 67ms/step - loss: 1.0000\n");
}

TEST(ProgbarText, DurationAndValueFormats) {
  EXPECT_EQ(format_eta(7.9), "7s");
  EXPECT_EQ(format_eta(60), "60s");
  EXPECT_EQ(format_eta(125.5), "2:05");
  EXPECT_EQ(format_eta(3600), "60:00");
  EXPECT_EQ(format_eta(3723.9), "1:02:03");
  EXPECT_EQ(format_per_unit(0, "step"), " 0s/step");
  EXPECT_EQ(format_per_unit(2.5, "epoch"), " 2s/epoch");  // rounded half to even, as Python
  EXPECT_EQ(format_per_unit(0.0123, "step"), " 12ms/step");
  EXPECT_EQ(format_per_unit(0.9996, "step"), " 1000ms/step");
  EXPECT_EQ(format_per_unit(0.00025, "step"), " 250us/step");
  EXPECT_EQ(format_value(0.5, false), "0.5000");
  EXPECT_EQ(format_value(0.001, true), "1.0000e-03");
  EXPECT_EQ(format_value(0.0, true), "0.0000e+00");
  EXPECT_EQ(format_value(-NAN, true), "nan");
  EXPECT_EQ(format_value(INFINITY, false), "inf");
}

// ProgbarLogger -------------------------------------------------------------------------

class FakeHost : public TrainingHost {
 public:
  explicit FakeHost(bool chief) : chief_(chief) {}
  bool stop_training() const override { return false; }
  void set_stop_training(bool) override {}
  double learning_rate() const override { return 0.1; }
  void set_learning_rate(double) override {}
  std::optional<double> momentum() const override { return std::nullopt; }
  void set_momentum(double) override {}
  std::vector<std::pair<std::string, torch::Tensor>> get_weights() const override { return {}; }
  void set_weights(const std::vector<std::pair<std::string, torch::Tensor>>&) override {}
  void save(const std::string&, bool,
            const std::vector<std::pair<std::string, double>>&) const override {}
  std::vector<std::pair<std::string, double>> load(const std::string&, bool) override { return {}; }
  bool is_chief() const override { return chief_; }
  int num_workers() const override { return 2; }
  int num_replicas_in_sync() const override { return 2; }
  std::int64_t iterations() const override { return 0; }
  void resume_at_epoch(int) override {}
  std::vector<double> average_over_workers(const std::vector<double>& v) override { return v; }
  void broadcast_weights_from_chief() override {}

 private:
  bool chief_;
};

// A logger writing to memory, with a clock the test moves.
class LoggerTest : public ::testing::Test {
 protected:
  void make(TrainParams params, bool dynamic = true, bool chief = true) {
    close();  // a second make() in one test starts a new logger on a new stream
    host_ = std::make_unique<FakeHost>(chief);
    out_ = ::open_memstream(&buf_, &size_);
    ProgbarOptions o;
    o.out = out_;
    o.dynamic = dynamic;
    o.clock = [this] { return now_; };
    logger_ = std::make_unique<ProgbarLogger>(o);
    logger_->set_host(host_.get());
    logger_->set_params(params);
  }
  void TearDown() override { close(); }
  void close() {
    logger_.reset();  // before its stream goes
    if (out_ != nullptr) std::fclose(out_);
    std::free(buf_);
    out_ = nullptr;
    buf_ = nullptr;
    size_ = taken_ = 0;
  }
  // Everything written since the last take(). The stream stays open: the logger holds
  // it (closing and reopening it here left the logger writing into the freed FILE,
  // which only worked where malloc happened to hand the new stream the same address;
  // under ASan take() then saw nothing).
  std::string take() {
    std::fflush(out_);
    std::string s(buf_ + taken_, size_ - taken_);
    taken_ = size_;
    return s;
  }
  // One epoch of `steps` batches one second apart (fit's batch logs: running averages).
  void epoch(int e, int steps, Logs end_logs) {
    Logs none;
    logger_->on_epoch_begin(e, none);
    for (int b = 0; b < steps; ++b) {
      now_ += 1;
      Logs logs{{"loss", 1.0 / (b + 1)}};
      logger_->on_train_batch_end(b, logs);
    }
    logger_->on_epoch_end(e, end_logs);
  }

  std::unique_ptr<FakeHost> host_;
  std::unique_ptr<ProgbarLogger> logger_;
  std::FILE* out_ = nullptr;
  char* buf_ = nullptr;
  size_t size_ = 0, taken_ = 0;
  double now_ = 100;
};

TrainParams fit_params(int epochs, std::int64_t steps, int verbose = 1) {
  TrainParams p;
  p.epochs = epochs;
  p.steps = steps;
  p.verbose = verbose;
  p.metrics = {"loss"};
  return p;
}

TEST_F(LoggerTest, FitShowsEpochHeadersBarsAndTheEpochLogs) {
  make(fit_params(2, 3));
  Logs none;
  logger_->on_train_begin(none);
  epoch(0, 3, {{"loss", 0.25}, {"val_loss", 0.5}});
  EXPECT_EQ(take(),
            "Epoch 1/2\n"
            "\r1/3 [=========>....................] - ETA: 2s - loss: 1.0000"
            "\r2/3 [===================>..........] - ETA: 1s - loss: 0.5000"
            // The last batch's update, then the epoch's end with the epoch's logs.
            "\r3/3 [==============================] - ETA: 0s - loss: 0.3333"
            "\r3/3 [==============================] - 3s 1s/step - loss: 0.2500 - val_loss: "
            "0.5000\n");
  // fit's validation (evaluate inside fit) shows nothing.
  Logs val{{"loss", 0.5}};
  logger_->on_test_begin(none);
  logger_->on_test_batch_end(0, val);
  logger_->on_test_end(val);
  EXPECT_EQ(take(), "");
  epoch(1, 3, {{"loss", 0.25}});
  EXPECT_EQ(take().substr(0, 10), "Epoch 2/2\n");
  logger_->on_train_end(none);
}

TEST_F(LoggerTest, NoHeaderForOneEpochAndTheHeaderCountsFromInitialEpoch) {
  make(fit_params(1, 2));
  Logs none;
  logger_->on_train_begin(none);
  epoch(0, 2, {{"loss", 0.5}});
  EXPECT_EQ(take().substr(0, 5), "\r1/2 ");
  make(fit_params(5, 2));
  logger_->on_train_begin(none);
  epoch(3, 2, {{"loss", 0.5}});  // fit(initial_epoch=3, epochs=5)
  EXPECT_EQ(take().substr(0, 10), "Epoch 4/5\n");
}

TEST_F(LoggerTest, VerboseTwoPrintsOneLinePerEpoch) {
  make(fit_params(2, 4, 2));
  Logs none;
  logger_->on_train_begin(none);
  epoch(0, 4, {{"loss", 0.25}, {"accuracy", 0.75}});
  EXPECT_EQ(take(), "Epoch 1/2\n4/4 - 4s - loss: 0.2500 - accuracy: 0.7500 - 4s/epoch - 1s/step\n");
}

TEST_F(LoggerTest, UnknownStepsBecomeTheSecondEpochsTarget) {
  make(fit_params(2, -1));
  Logs none;
  logger_->on_train_begin(none);
  epoch(0, 2, {{"loss", 0.5}});
  EXPECT_EQ(take(),
            "Epoch 1/2\n"
            "\r      1/Unknown - 1s 1s/step - loss: 1.0000"
            "\r      2/Unknown - 2s 1s/step - loss: 0.5000"
            "\r2/2 [==============================] - 2s 1s/step - loss: 0.5000\n");
  epoch(1, 2, {{"loss", 0.5}});
  EXPECT_EQ(take(),
            "Epoch 2/2\n"
            "\r1/2 [==============>...............] - ETA: 1s - loss: 1.0000"
            "\r2/2 [==============================] - ETA: 0s - loss: 0.5000"
            "\r2/2 [==============================] - 2s 1s/step - loss: 0.5000\n");
}

TEST_F(LoggerTest, EvaluateAndPredictOutsideFitShowTheirOwnBars) {
  make(fit_params(1, 2));
  Logs none;
  logger_->on_test_begin(none);
  for (int b = 0; b < 2; ++b) {
    now_ += 0.5;
    Logs logs{{"loss", 0.75}, {"accuracy", 0.5}};
    logger_->on_test_batch_end(b, logs);
  }
  Logs end{{"loss", 0.75}, {"accuracy", 0.5}};
  logger_->on_test_end(end);
  EXPECT_EQ(take(),
            "\r1/2 [==============>...............] - ETA: 0s - loss: 0.7500 - accuracy: 0.5000"
            "\r2/2 [==============================] - ETA: 0s - loss: 0.7500 - accuracy: 0.5000"
            "\r2/2 [==============================] - 1s 500ms/step - loss: 0.7500 - accuracy: "
            "0.5000\n");
  logger_->on_predict_begin(none);
  for (int b = 0; b < 2; ++b) {
    now_ += 0.002;
    Logs outputs{{"ignored", 1.0}};
    logger_->on_predict_batch_end(b, outputs);
  }
  logger_->on_predict_end(none);
  EXPECT_EQ(take(),
            // (the second batch came within 0.05 s of the first: not shown)
            "\r1/2 [==============>...............] - ETA: 0s"
            "\r2/2 [==============================] - 0s 2ms/step\n");
}

TEST_F(LoggerTest, OtherWorkersAndVerboseZeroWriteNothing) {
  for (const auto& [chief, verbose] :
       {std::pair{false, 1}, std::pair{false, 2}, std::pair{true, 0}}) {
    make(fit_params(3, 2, verbose), true, chief);
    Logs none;
    logger_->on_train_begin(none);
    epoch(0, 2, {{"loss", 0.5}});
    logger_->on_train_end(none);
    logger_->on_test_begin(none);
    logger_->on_test_end(none);
    logger_->on_predict_begin(none);
    logger_->on_predict_end(none);
    EXPECT_EQ(take(), "") << "chief " << chief << " verbose " << verbose;
  }
}

TEST_F(LoggerTest, WholeLinesComeAMinuteApartAndAtTheEnd) {
  make(fit_params(1, 100), /*dynamic=*/false);
  Logs none;
  logger_->on_train_begin(none);
  epoch(0, 100, {{"loss", 0.5}});  // 100 s: one line after 60 s, then the final one
  EXPECT_EQ(take(),
            " 60/100 [=================>............] - ETA: 40s - loss: 0.0167\n"
            "100/100 [==============================] - 100s 1s/step - loss: 0.5000\n");
}

TEST(ProgbarLoggerMode, KoloTerminalDecidesElseWhetherTheOutputIsATerminal) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  ProgbarOptions o;
  o.out = file;
  ::unsetenv("KOLO_TERMINAL");
  EXPECT_FALSE(ProgbarLogger(o).dynamic());
  ::setenv("KOLO_TERMINAL", "1", 1);
  EXPECT_TRUE(ProgbarLogger(o).dynamic());
  ::setenv("KOLO_TERMINAL", "0", 1);
  EXPECT_FALSE(ProgbarLogger(o).dynamic());
  o.dynamic = true;
  EXPECT_TRUE(ProgbarLogger(o).dynamic());  // the option wins
  ::unsetenv("KOLO_TERMINAL");
  std::fclose(file);
}

}  // namespace
}  // namespace kolo::train
