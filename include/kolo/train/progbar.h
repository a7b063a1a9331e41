// The progress bar of fit/evaluate/predict: Keras's (tf.keras 2) ProgbarLogger, text for
// text. Part of <kolo/train.h>.
//
//   Epoch 1/5
//   1875/1875 [==============================] - 3s 1ms/step - loss: 0.5002 - accuracy: 0.8250
//
// verbose 1 (params().verbose): a bar per epoch, updated after each batch, whose last
// update ends the line with the epoch's time and time per step and the epoch's logs
// (val_* included). verbose 2: one line per epoch, at its end:
//
//   1875/1875 - 3s - loss: 0.5002 - accuracy: 0.8250 - 3s/epoch - 1ms/step
//
// "Epoch E/N" comes first when fit's `epochs` is more than 1. Values are shown as
// " - name: %.4f", or "%.4e" when their magnitude is at most 1e-3 (verbose 2: when the
// value is at most 1e-3, negative ones included, as Keras does). fit's logs are running
// epoch averages already, so they are shown as they come (Keras's stateful metrics).
// While a bar runs it shows " - ETA: 7s" ("2:05", "1:02:03"), from the mean time of the
// steps after the first; unknown steps (params().steps == -1) show "%7d/Unknown" and the
// time so far, and the first epoch's count becomes the bar's target for the next ones.
// evaluate and predict outside fit show a bar of their own (fit's validation is
// silent); predict's has no values.
//
// Chief only: on other workers the callback writes nothing at all.
//
// Redrawn in place or whole lines:
// - Redrawn in place ("\r" then the bar, padded with blanks over a longer previous
//   one), at most every 0.05 s, when `dynamic` is not given and the environment
//   variable KOLO_TERMINAL is 1 (kolorun on a terminal sets it for its workers and shows
//   their updates in place, docs/launcher.md), or KOLO_TERMINAL is unset and `out` is a
//   terminal (isatty). KOLO_TERMINAL=0 asks for whole lines.
// - Whole lines otherwise: each update a line of its own ending in "\n", at most one a
//   minute (the first a minute after the bar started), and always the final line.
// This differs from Keras on purpose in three ways: Keras redraws on every POSIX system,
// even into files (its test is `"posix" in sys.modules`); its whole-line mode puts the
// "\n" in front of each update, so a line is finished only by the next write (and the
// first follows an empty one); and that mode updates every 0.05 s too, up to 20 lines a
// second into a log. Keras's "\b"s in front of the "\r" change nothing on a terminal and
// are left out. docs/progbar.md has examples.
//
// Not for: logging (KOLO_LOG); other callbacks (callbacks.h).
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kolo/train/callback.h"

namespace kolo::train {

struct ProgbarOptions {
  // Where the bar goes (default stdout). Flushed after each write.
  std::FILE* out = nullptr;
  // Whether it is redrawn in place (default: detected as above).
  std::optional<bool> dynamic{};
  // Least seconds between two updates of a bar shown (verbose 1; the final line always
  // is). Default: 0.05 when redrawn in place (Keras's), 60 for whole lines. >= 0.
  std::optional<double> interval{};
  // Seconds on a monotonic clock (default: std::chrono::steady_clock); tests inject one.
  std::function<double()> clock{};
};

// fit() adds one when verbose is 1 or 2 (params().verbose chooses the format).
class ProgbarLogger : public Callback {
 public:
  explicit ProgbarLogger(ProgbarOptions options = {});
  ~ProgbarLogger() override;
  void on_train_begin(Logs& logs) override;
  void on_train_end(Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_train_batch_end(int batch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_test_begin(Logs& logs) override;
  void on_test_batch_end(int batch, Logs& logs) override;
  void on_test_end(Logs& logs) override;
  void on_predict_begin(Logs& logs) override;
  void on_predict_batch_end(int batch, Logs& logs) override;
  void on_predict_end(Logs& logs) override;

  // Whether this logger redraws in place (the options' choice, or what was detected).
  bool dynamic() const;

 private:
  struct State;
  // verbose is not 0 and this worker is the chief.
  bool shown() const;
  std::unique_ptr<State> s_;
};

}  // namespace kolo::train
