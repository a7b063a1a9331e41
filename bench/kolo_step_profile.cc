// Where a kolo training step's time goes: examples/fashion_mnist.cc's model and loop with
// every phase timed, for docs/history/benchmarks.md's analysis. Run it like the example:
//
//   kolorun -np 2 build/bin/kolo_step_profile --max-steps 300
//   KOLO_TRANSPORT=local build/bin/kolo_step_profile ... & (twice: independent workers)
//
// Every rank prints the mean milliseconds per step of: forward+loss, backward (during
// which the gradients' allreduces start), synchronize() (waiting for the allreduces after
// backward), the Adam step and loss.item(); the step total; and, per gradient, the mean
// enqueue->start time (negotiation: queueing until every rank has submitted it) and
// start->finish time (the data transfer), from DistributedOptimizer::last_times().
// The first --skip steps are excluded. Not a test and not the example: no evaluation.
// --timeline PREFIX writes PREFIX.<rank>.csv: per step, the steady_clock times (ns, the
// same clock for every process on a host) of the phase boundaries and of every gradient's
// enqueue/start/finish, to line the ranks up against each other.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "fashion_mnist_model.h"
#include "kolo/torch.h"

namespace {

using kolo_examples::Net;

using Clock = std::chrono::steady_clock;
double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::int64_t max_steps = 300, batch_size = 64, skip = 5;
  std::string data = "/usr/share/datasets/fashion-mnist", timeline;
  bool lockstep_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--max-steps")
      max_steps = std::stoll(v);
    else if (a == "--batch-size")
      batch_size = std::stoll(v);
    else if (a == "--skip")
      skip = std::stoll(v);
    else if (a == "--data")
      data = v;
    else if (a == "--timeline")
      timeline = v;
    else if (a == "--lockstep-only")
      lockstep_only = v == "1";
    else {
      std::fprintf(stderr,
                   "usage: %s [--max-steps N] [--batch-size N] [--skip N] [--data DIR] "
                   "[--timeline PREFIX] [--lockstep-only 1]\n",
                   argv[0]);
      return 2;
    }
  }
  kolo::init();
  const int rank = kolo::rank(), size = kolo::size();
  torch::manual_seed(42);
  torch::set_num_threads(1);
  const torch::Tensor images = kolo::load_idx_images(data + "/train-images-idx3-ubyte.gz");
  const torch::Tensor labels = kolo::load_idx_labels(data + "/train-labels-idx1-ubyte.gz");
  Net model;
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3 * size));
  // --lockstep-only 1: no gradient averaging; the ranks only meet at a kolo::barrier() where
  // synchronize() would be, so they run in lock step like data-parallel workers but
  // without communicating (each trains on its own).
  std::optional<kolo::DistributedOptimizer> distributed;
  if (!lockstep_only) distributed.emplace(adam, model->named_parameters());
  kolo::broadcast_parameters(model->named_parameters(), 0);
  kolo::broadcast_optimizer_state(adam, 0);
  kolo::DistributedSampler sampler(labels.size(0), size, rank, true, 42, true);
  const torch::Tensor order = torch::tensor(sampler.indices(), torch::kInt64);
  const std::int64_t steps =
      std::min<std::int64_t>(max_steps, (order.size(0) + batch_size - 1) / batch_size);

  const std::vector<std::string> names = [&] {
    std::vector<std::string> n;
    for (const auto& p : model->named_parameters()) n.push_back(p.key());
    return n;
  }();
  enum { kForward, kBackward, kSync, kAdam, kItem, kPhases };
  const char* phase_names[kPhases] = {"forward+loss", "backward", "synchronize", "adam step",
                                      "loss.item"};
  double phase[kPhases] = {}, total = 0;
  std::vector<double> negotiate(names.size()), transfer(names.size()), after_backward(names.size());
  std::int64_t counted = 0;
  std::ofstream csv;
  auto ns = [](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  if (!timeline.empty()) {
    csv.open(timeline + "." + std::to_string(rank) + ".csv");
    csv << "step,start,forward_end,backward_end,sync_end,adam_end,item_end";
    for (const auto& n : names) csv << "," << n << ".enq," << n << ".start," << n << ".fin";
    csv << "\n";
  }
  Clock::time_point measured_start;
  for (std::int64_t step = 0; step < steps; ++step) {
    if (step == skip) measured_start = Clock::now();
    const torch::Tensor batch = order.slice(0, step * batch_size, (step + 1) * batch_size);
    const auto t0 = Clock::now();
    if (distributed) {
      distributed->zero_grad();
    } else {
      adam.zero_grad();
    }
    const torch::Tensor loss = torch::nll_loss(model->forward(images.index_select(0, batch)),
                                               labels.index_select(0, batch));
    const auto t1 = Clock::now();
    loss.backward();
    const auto t2 = Clock::now();
    if (distributed) {
      distributed->synchronize();
    } else {
      kolo::barrier();
    }
    const auto t3 = Clock::now();
    if (distributed) {
      auto guard = distributed->skip_synchronize();
      distributed->step();
    } else {
      adam.step();
    }
    const auto t4 = Clock::now();
    (void)loss.item<double>();
    const auto t5 = Clock::now();
    const auto times =
        distributed ? distributed->last_times() : decltype(distributed->last_times()){};
    if (csv.is_open()) {
      csv << step << "," << ns(t0) << "," << ns(t1) << "," << ns(t2) << "," << ns(t3) << ","
          << ns(t4) << "," << ns(t5);
      for (const auto& t : times) {
        csv << "," << ns(t.enqueued) << "," << ns(t.started) << "," << ns(t.finished);
      }
      csv << "\n";
    }
    if (step < skip) continue;
    ++counted;
    phase[kForward] += ms(t1 - t0);
    phase[kBackward] += ms(t2 - t1);
    phase[kSync] += ms(t3 - t2);
    phase[kAdam] += ms(t4 - t3);
    phase[kItem] += ms(t5 - t4);
    total += ms(t5 - t0);
    for (std::size_t i = 0; i < times.size() && i < names.size(); ++i) {
      negotiate[i] += ms(times[i].started - times[i].enqueued);
      transfer[i] += ms(times[i].finished - times[i].started);
      after_backward[i] += ms(times[i].finished - t2);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - measured_start).count();
  const double n = static_cast<double>(std::max<std::int64_t>(counted, 1));
  std::string out = "rank " + std::to_string(rank) + " of " + std::to_string(size) + ": " +
                    std::to_string(counted) + " steps, " +
                    std::to_string(static_cast<int>(counted * batch_size / seconds)) +
                    " images/s on this worker; mean ms per step:\n";
  char line[256];
  for (int p = 0; p < kPhases; ++p) {
    std::snprintf(line, sizeof line, "  %-14s %7.2f\n", phase_names[p], phase[p] / n);
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-14s %7.2f\n", "step total", total / n);
  out += line;
  out += "  gradient         enqueue->start  start->finish  finish-after-backward\n";
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::snprintf(line, sizeof line, "  %-16s %14.3f %14.3f %14.3f\n", names[i].c_str(),
                  negotiate[i] / n, transfer[i] / n, after_backward[i] / n);
    out += line;
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  kolo::shutdown();
  return 0;
}
