// `kolo_bench gradients`: the gradient allreduces of one training step of a real model,
// against one allreduce of the same number of bytes.
//
// A "step" submits every parameter's gradient (float32, its own buffer, its own name) with
// allreduce_async(kAverage) in reverse registration order, as backward hooks of a
// DistributedOptimizer would, then waits for all of them. Its time runs from the first
// submit to the last wait() returning. The "single" measurement allreduces one buffer
// holding all the parameters' bytes under one name. Both report the median over
// iterations of the maximum over ranks; ratio = step / single shows what splitting the
// gradients into many named tensors costs (negotiation, fusion, per-tensor overhead).
#include <cstdio>
#include <memory>

#include "kolo_bench/bench_util.h"
#include "kolo_bench/commands.h"
#include "kolo_bench/models.h"

namespace kolo_bench {

namespace {

// Runs `op` warmup + iters times; returns the per-iteration times, max over ranks.
template <typename Op>
Stats time_iterations(const GradientsArgs& a, const std::string& name, Op op) {
  for (int i = 0; i < a.warmup; ++i) op();
  std::vector<double> us(static_cast<std::size_t>(a.iters));
  for (auto& t : us) {
    const auto t0 = Clock::now();
    op();
    t = micros(t0, Clock::now());
  }
  return summarize(max_over_ranks(us, name));
}

}  // namespace

int run_gradients(const GradientsArgs& a) {
  const ModelParams m = model_params(a.model);
  const std::int64_t total = m.total_numel();
  const std::int64_t bytes = total * 4;
  const int n = kolo::size();
  const bool root = kolo::rank() == 0;
  if (root) {
    std::printf("model %s: %zu tensors, %lld parameters (%lld bytes float32), %d ranks\n",
                m.model.c_str(), m.params.size(), static_cast<long long>(total),
                static_cast<long long>(bytes), n);
    std::fflush(stdout);
  }

  Stats step;
  {
    std::vector<std::unique_ptr<float[]>> grads;
    std::vector<kolo::TensorView> views;
    std::vector<kolo::AllreduceOptions> opts;
    for (const auto& p : m.params) {
      grads.emplace_back(new float[static_cast<std::size_t>(p.numel())]());
      kolo::TensorView v;
      v.data = grads.back().get();
      v.shape = p.shape;
      views.push_back(v);
      opts.push_back({.name = "grad." + p.name});
    }
    std::vector<kolo::Handle> handles(views.size());
    step = time_iterations(a, "bench.times.step", [&] {
      for (std::size_t i = views.size(); i-- > 0;) {
        handles[i] = kolo::allreduce_async(views[i], views[i], opts[i]);
      }
      for (auto& h : handles) h.wait();
    });
  }
  Stats single;
  {
    std::unique_ptr<float[]> flat(new float[static_cast<std::size_t>(total)]());
    const kolo::TensorView v = view_of(flat.get(), kolo::DataType::kFloat32, total);
    single = time_iterations(a, "bench.times.single",
                             [&] { kolo::allreduce(v, v, {.name = "grad.flat"}); });
  }

  const double ratio = single.median > 0 ? step.median / single.median : 0;
  if (root) {
    std::printf(
        "step (%zu allreduces, reverse order): median %.1f us (p10 %.1f, p90 %.1f), "
        "algbw %.3f GB/s\n",
        m.params.size(), step.median, step.p10, step.p90, gbps(bytes, step.median));
    std::printf(
        "single allreduce of %lld bytes:     median %.1f us (p10 %.1f, p90 %.1f), "
        "algbw %.3f GB/s\n",
        static_cast<long long>(bytes), single.median, single.p10, single.p90,
        gbps(bytes, single.median));
    std::printf("ratio step/single: %.3f (iterations %d, warm-up %d; time = max over ranks)\n",
                ratio, a.iters, a.warmup);
    std::fflush(stdout);
  }
  const std::vector<std::int64_t> rss = report_peak_rss();
  if (root && !a.json.empty()) {
    write_json(a.json, {{"model", m.model},
                        {"ranks", n},
                        {"tensors", m.params.size()},
                        {"parameters", total},
                        {"bytes", bytes},
                        {"dtype", "f32"},
                        {"iters", a.iters},
                        {"step_time_us_median", step.median},
                        {"step_time_us_p10", step.p10},
                        {"step_time_us_p90", step.p90},
                        {"single_time_us_median", single.median},
                        {"single_time_us_p10", single.p10},
                        {"single_time_us_p90", single.p90},
                        {"ratio_step_single", ratio},
                        {"peak_rss_kib", rss},
                        {"timing", "max over ranks per iteration"}});
  }
  return 0;
}

}  // namespace kolo_bench
