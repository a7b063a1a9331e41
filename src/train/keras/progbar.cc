// ProgbarLogger (progbar.h): when Keras's ProgbarLogger starts, updates and ends a bar
// in fit, evaluate and predict, and where the text goes. The text is Progbar's
// (progbar_format.h).
#include "kolo/train/progbar.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "startup/config.h"
#include "train/keras/progbar_format.h"

namespace kolo::train {

struct ProgbarLogger::State {
  std::FILE* out = stdout;
  bool dynamic = false;
  double interval = 0.05;
  std::function<double()> clock;

  std::optional<internal::Progbar> bar;  // the bar being drawn
  std::int64_t seen = 0;                 // steps of that bar so far
  bool in_fit = false;                   // between on_train_begin and on_train_end
  // The steps of fit's epochs: params().steps, or the first epoch's count when unknown.
  std::int64_t fit_target = -1;

  void write(const std::string& text) const {
    if (text.empty()) return;
    std::fputs(text.c_str(), out);
    std::fflush(out);  // a pipe (kolorun) would otherwise see it only when stdio's buffer fills
  }
  void start(std::int64_t target, int verbose) {
    internal::ProgbarFormat f;
    f.target = target;
    f.verbose = verbose;
    f.dynamic = dynamic;
    f.interval = interval;
    bar.emplace(std::move(f), clock());
    seen = 0;
  }
  void step(int batch, const Logs& logs, int verbose) {
    seen = batch + 1;
    if (verbose == 1) write(bar->update(seen, logs.items(), /*final=*/false, clock()));
  }
  // Keras's _finalize_progbar: an unknown target becomes the steps seen.
  void end(const Logs& logs) {
    if (bar->target() < 0) bar->set_target(seen);
    write(bar->update(bar->target(), logs.items(), /*final=*/true, clock()));
    bar.reset();
  }
};

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool detect_dynamic(std::FILE* out) {
  // kolorun tells its workers whether its own stdout is a terminal (docs/launcher.md).
  return core::output_is_terminal(core::process_env(), ::fileno(out));
}

std::int64_t known(std::int64_t steps) { return steps >= 0 ? steps : -1; }

}  // namespace

ProgbarLogger::ProgbarLogger(ProgbarOptions options) : s_(std::make_unique<State>()) {
  if (options.out != nullptr) s_->out = options.out;
  s_->dynamic = options.dynamic ? *options.dynamic : detect_dynamic(s_->out);
  s_->interval = options.interval ? *options.interval : (s_->dynamic ? 0.05 : 60.0);
  s_->clock = options.clock ? std::move(options.clock) : steady_seconds;
}

ProgbarLogger::~ProgbarLogger() = default;

bool ProgbarLogger::dynamic() const { return s_->dynamic; }

bool ProgbarLogger::shown() const { return params().verbose != 0 && host().is_chief(); }

void ProgbarLogger::on_train_begin(Logs& /*logs*/) {
  // Validation inside fit is silent (Keras's _called_in_fit).
  s_->in_fit = true;
  s_->fit_target = known(params().steps);
}

void ProgbarLogger::on_train_end(Logs& /*logs*/) {
  s_->in_fit = false;
  s_->bar.reset();
}

void ProgbarLogger::on_epoch_begin(int epoch, Logs& /*logs*/) {
  if (!shown()) return;
  s_->start(s_->fit_target, params().verbose);
  if (params().epochs > 1) {
    s_->write("Epoch " + std::to_string(epoch + 1) + "/" + std::to_string(params().epochs) + "\n");
  }
}

void ProgbarLogger::on_train_batch_end(int batch, Logs& logs) {
  if (!shown()) return;
  if (!s_->bar) s_->start(s_->fit_target, params().verbose);
  s_->step(batch, logs, params().verbose);
}

void ProgbarLogger::on_epoch_end(int /*epoch*/, Logs& logs) {
  if (!shown()) return;
  if (!s_->bar) s_->start(s_->fit_target, params().verbose);
  if (s_->fit_target < 0) s_->fit_target = s_->seen;  // the next epochs know their steps
  s_->end(logs);
}

void ProgbarLogger::on_test_begin(Logs& /*logs*/) {
  if (!shown()) return;
  if (!s_->in_fit) s_->start(known(params().steps), params().verbose);
}

void ProgbarLogger::on_test_batch_end(int batch, Logs& logs) {
  if (!shown()) return;
  if (s_->in_fit) return;
  if (!s_->bar) s_->start(known(params().steps), params().verbose);
  s_->step(batch, logs, params().verbose);
}

void ProgbarLogger::on_test_end(Logs& logs) {
  if (!shown()) return;
  if (s_->in_fit) return;
  if (!s_->bar) s_->start(known(params().steps), params().verbose);
  s_->end(logs);
}

void ProgbarLogger::on_predict_begin(Logs& /*logs*/) {
  if (!shown()) return;
  s_->start(known(params().steps), params().verbose);
}

void ProgbarLogger::on_predict_batch_end(int batch, Logs& /*logs*/) {
  if (!shown()) return;
  if (!s_->bar) s_->start(known(params().steps), params().verbose);
  s_->step(batch, Logs(), params().verbose);  // predictions are not values to show
}

void ProgbarLogger::on_predict_end(Logs& logs) {
  if (!shown()) return;
  if (!s_->bar) s_->start(known(params().steps), params().verbose);
  s_->end(logs);
}

}  // namespace kolo::train
