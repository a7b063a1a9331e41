// The progress bar of fit/evaluate/predict: Keras's (tf.keras 2) ProgbarLogger, text for
// text. Part of <kolo/train.h>.
//
//   Epoch 1/5
//   1875/1875 [==============================] - 3s 1ms/step - loss: 0.5002 - accuracy: 0.8250
//
// Chief only. Redrawn in place ("\r") when the output is a terminal: this process's
// stdout, or, under kolorun, kolorun's own (kolorun tells its workers, see
// docs/launcher.md); whole lines otherwise.
//
// Not for: logging (KOLO_LOG); other callbacks (callbacks.h).
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "kolo/train/callback.h"

namespace kolo::train {

struct ProgbarOptions {
  // Where the bar goes (default stdout) and whether it is redrawn in place (default:
  // detected as above).
  std::FILE* out = nullptr;
  std::optional<bool> dynamic;
};

// fit() adds one when verbose is 1 or 2 (params().verbose chooses the format).
class ProgbarLogger : public Callback {
 public:
  explicit ProgbarLogger(ProgbarOptions options = {});
  ~ProgbarLogger() override;
  void on_train_begin(Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_train_batch_end(int batch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_test_begin(Logs& logs) override;
  void on_test_batch_end(int batch, Logs& logs) override;
  void on_test_end(Logs& logs) override;
  void on_predict_begin(Logs& logs) override;
  void on_predict_batch_end(int batch, Logs& logs) override;
  void on_predict_end(Logs& logs) override;

 private:
  struct Bar;
  ProgbarOptions o_;
  Bar* bar_ = nullptr;
};

}  // namespace kolo::train
