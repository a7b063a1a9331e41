// Where fit's own time goes on one process (docs/history/benchmarks.md, session 10): keras_mnist's
// model and data, one worker, no kolo runtime, in three loops timed step by step:
//
//   loop      the hand-written step: zero_grad, forward, cross_entropy (mean), loss.item(),
//             argmax == label count .item(), backward, Adam step
//   loop+fit  the same step with fit's loss and metric objects instead
//             (SparseCategoricalCrossentropy::per_example summed and scaled, its sum
//             .item(), SparseCategoricalAccuracy::accumulate, the state as a tensor):
//             what fit's exact, checked losses and metrics cost per step
//   fit       Model::fit with the default strategy (one replica) over the same steps
//
//   build/bin/fit_parts [--steps 1875] [--repeat 3] [--threads 1]
//
// Prints microseconds per step, wall and this thread's CPU time (medians over --repeat
// runs of --steps steps each), as one JSON line. The multi-worker part (the metrics' allreduce) is
// mlp_loop --fit-metrics 1. Not a test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kolo/torch.h"
#include "kolo/train.h"

namespace kt = kolo::train;

namespace {

using Clock = std::chrono::steady_clock;

// This thread's CPU time (every loop runs on the calling thread): steadier than wall time
// on a machine that other jobs share.
double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

struct Data {
  torch::Tensor x, y, order;
};

// A step of the hand-written loop; with_fit_metrics: fit's loss and metric objects.
struct LoopStep {
  torch::nn::Sequential model = kt::Sequential({kt::Dense(64, "relu", 784), kt::Dense(10)});
  torch::optim::Adam adam{model->parameters(), torch::optim::AdamOptions(1e-3).eps(1e-7)};
  kt::SparseCategoricalCrossentropy loss_fn{/*from_logits=*/true};
  kt::SparseCategoricalAccuracy accuracy;
  double sink = 0;

  void run(const Data& d, std::int64_t lo, std::int64_t n, bool with_fit_metrics) {
    const torch::Tensor idx = d.order.slice(0, lo, lo + n);
    const torch::Tensor xb = d.x.index_select(0, idx), yb = d.y.index_select(0, idx);
    adam.zero_grad();
    const torch::Tensor out = model->forward(xb);
    torch::Tensor loss;
    if (with_fit_metrics) {
      const torch::Tensor per = loss_fn.per_example(out, yb);
      loss = per.sum() * (1.0 / static_cast<double>(n) / 2.0);
      double state[4] = {per.detach().sum().item<double>(), static_cast<double>(n), 0, 0};
      accuracy.accumulate(out.detach(), yb, &state[2]);
      sink += torch::tensor(std::vector<double>(state, state + 4), torch::kFloat64)
                  .data_ptr<double>()[0];
    } else {
      loss = torch::nn::functional::cross_entropy(out, yb);
      sink += loss.item<double>();
      sink += out.detach().argmax(1).eq(yb).sum().item<double>();
    }
    loss.backward();
    adam.step();
  }
};

struct Timer : kt::Callback {
  Clock::time_point start;
  double cpu_start = 0, seconds = 0, cpu_us = 0;
  void on_epoch_begin(int, kt::Logs&) override {
    start = Clock::now();
    cpu_start = thread_cpu_us();
  }
  void on_epoch_end(int, kt::Logs&) override {
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    cpu_us += thread_cpu_us() - cpu_start;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t steps = 1875, batch = 16;
  int repeat = 3, threads = 1;
  std::string data = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--steps")
      steps = std::stoll(v);
    else if (a == "--repeat")
      repeat = std::stoi(v);
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--batch-size")
      batch = std::stoll(v);
    else {
      std::fprintf(stderr, "usage: %s [--steps N] [--repeat N] [--threads N] [--batch-size N]\n",
                   argv[0]);
      return 2;
    }
  }
  torch::set_num_threads(threads);
  torch::manual_seed(42);
  const kt::Dataset train = kt::Dataset::from_idx(data + "/train-images-idx3-ubyte.gz",
                                                  data + "/train-labels-idx1-ubyte.gz");
  Data d{train.x(), train.y(), torch::randperm(train.size(), torch::kLong)};
  steps = std::min(steps, train.size() / batch);

  std::vector<double> loop_us, loop_fit_us, fit_us, loop_cpu, loop_fit_cpu, fit_cpu;
  for (int r = 0; r < repeat; ++r) {
    for (bool with_fit : {false, true}) {
      LoopStep step;
      const auto t0 = Clock::now();
      const double c0 = thread_cpu_us();
      for (std::int64_t s = 0; s < steps; ++s) step.run(d, s * batch, batch, with_fit);
      const double cpu = thread_cpu_us() - c0;
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      (with_fit ? loop_fit_us : loop_us).push_back(us / static_cast<double>(steps));
      (with_fit ? loop_fit_cpu : loop_cpu).push_back(cpu / static_cast<double>(steps));
    }
    kt::Strategy strategy;
    kt::Model model(kt::Sequential({kt::Dense(64, "relu", 784), kt::Dense(10)}), strategy);
    model.compile(kt::Adam{}, std::make_shared<kt::SparseCategoricalCrossentropy>(true),
                  {"accuracy"});
    auto timer = std::make_shared<Timer>();
    kt::FitOptions o;
    o.epochs = 1;
    o.batch_size = batch;
    o.verbose = 0;
    o.steps_per_epoch = steps;
    o.callbacks.push_back(timer);
    model.fit(train, o);
    fit_us.push_back(timer->seconds * 1e6 / static_cast<double>(steps));
    fit_cpu.push_back(timer->cpu_us / static_cast<double>(steps));
  }
  const nlohmann::json out = {{"steps", steps},
                              {"batch", batch},
                              {"threads", threads},
                              {"loop_us_per_step", median(loop_us)},
                              {"loop_with_fit_metrics_us_per_step", median(loop_fit_us)},
                              {"fit_us_per_step", median(fit_us)},
                              {"loop_cpu_us_per_step", median(loop_cpu)},
                              {"loop_with_fit_metrics_cpu_us_per_step", median(loop_fit_cpu)},
                              {"fit_cpu_us_per_step", median(fit_cpu)},
                              {"loop_runs", loop_us},
                              {"loop_with_fit_metrics_runs", loop_fit_us},
                              {"fit_runs", fit_us}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
