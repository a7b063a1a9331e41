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
// Steps and single allreduces alternate (step, single, step, ...) so that on a shared
// machine both see the same load; the per-pair ratios' median is reported too.
#include <cstdio>
#include <memory>

#include "kolo_bench/bench_util.h"
#include "kolo_bench/commands.h"
#include "kolo_bench/models.h"

namespace kolo_bench {

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
  auto step = [&] {
    for (std::size_t i = views.size(); i-- > 0;) {
      handles[i] = kolo::allreduce_async(views[i], views[i], opts[i]);
    }
    for (auto& h : handles) h.wait();
  };
  std::unique_ptr<float[]> flat(new float[static_cast<std::size_t>(total)]());
  const kolo::TensorView flat_view = view_of(flat.get(), kolo::DataType::kFloat32, total);
  auto single = [&] { kolo::allreduce(flat_view, flat_view, {.name = "grad.flat"}); };

  // Steps and single allreduces alternate, so that both see the same machine load.
  for (int i = 0; i < a.warmup; ++i) {
    step();
    single();
  }
  std::vector<double> step_us, single_us;
  for (int i = 0; i < a.iters; ++i) {
    auto t0 = Clock::now();
    step();
    auto t1 = Clock::now();
    single();
    step_us.push_back(micros(t0, t1));
    single_us.push_back(micros(t1, Clock::now()));
  }
  const std::vector<double> step_max = max_over_ranks(step_us, "bench.times.step");
  const std::vector<double> single_max = max_over_ranks(single_us, "bench.times.single");
  std::vector<double> pair_ratio;
  for (std::size_t i = 0; i < step_max.size(); ++i) {
    pair_ratio.push_back(single_max[i] > 0 ? step_max[i] / single_max[i] : 0);
  }
  const Stats st = summarize(step_max), sg = summarize(single_max), pr = summarize(pair_ratio);
  const double ratio = sg.median > 0 ? st.median / sg.median : 0;
  if (root) {
    std::printf(
        "step (%zu allreduces, reverse order): median %.1f us (p10 %.1f, p90 %.1f), "
        "algbw %.3f GB/s\n",
        m.params.size(), st.median, st.p10, st.p90, gbps(bytes, st.median));
    std::printf(
        "single allreduce of %lld bytes:     median %.1f us (p10 %.1f, p90 %.1f), "
        "algbw %.3f GB/s\n",
        static_cast<long long>(bytes), sg.median, sg.p10, sg.p90, gbps(bytes, sg.median));
    std::printf(
        "ratio step/single: %.3f (median of pairs %.3f; iterations %d, warm-up %d; time "
        "= max over ranks)\n",
        ratio, pr.median, a.iters, a.warmup);
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
                        {"step_time_us_median", st.median},
                        {"step_time_us_p10", st.p10},
                        {"step_time_us_p90", st.p90},
                        {"single_time_us_median", sg.median},
                        {"single_time_us_p10", sg.p10},
                        {"single_time_us_p90", sg.p90},
                        {"ratio_step_single", ratio},
                        {"ratio_step_single_pairs_median", pr.median},
                        {"peak_rss_kib", rss},
                        {"timing", "max over ranks per iteration"}});
  }
  return 0;
}

}  // namespace kolo_bench
