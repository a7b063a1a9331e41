// `kolo_bench latency`: round trip of a 4-byte (one float32) allreduce through the whole
// runtime (enqueue, negotiation on the response cache's fast path, transport, handle
// completion) at the job's world size. Back-to-back iterations under one name, no
// barrier; each iteration's time is the maximum over ranks of submit -> wait() returned.
#include <algorithm>
#include <cstdio>

#include "kolo_bench/bench_util.h"
#include "kolo_bench/commands.h"

namespace kolo_bench {

int run_latency(const LatencyArgs& a) {
  float x = 0;
  const kolo::TensorView v = view_of(&x, kolo::DataType::kFloat32, 1);
  const kolo::AllreduceOptions opts{.name = "bench.latency", .op = kolo::ReduceOp::kSum};
  for (int i = 0; i < a.warmup; ++i) kolo::allreduce_async(v, v, opts).wait();
  std::vector<double> us(static_cast<std::size_t>(a.iters));
  for (auto& t : us) {
    const auto t0 = Clock::now();
    kolo::allreduce_async(v, v, opts).wait();
    t = micros(t0, Clock::now());
  }
  const Stats own = summarize(us);
  const std::vector<double> slowest = max_over_ranks(us, "bench.times.latency");
  const Stats s = summarize(slowest);
  const int n = kolo::size();
  if (kolo::rank() == 0) {
    std::printf("kolo latency: 4-byte allreduce, %d ranks, %d iterations (warm-up %d)\n", n,
                a.iters, a.warmup);
    std::printf("max over ranks: median %.1f us, p10 %.1f us, p90 %.1f us (min %.1f, max %.1f)\n",
                s.median, s.p10, s.p90, s.min, s.max);
    std::printf("rank 0 alone:   median %.1f us, p10 %.1f us, p90 %.1f us\n", own.median, own.p10,
                own.p90);
    if (a.series > 0) {
      std::printf("median/p90 (max over ranks) of each %d iterations, in order, us:", a.series);
      const auto step = static_cast<std::size_t>(a.series);
      for (std::size_t b = 0; b < slowest.size(); b += step) {
        const std::vector<double> part(
            slowest.begin() + static_cast<std::ptrdiff_t>(b),
            slowest.begin() + static_cast<std::ptrdiff_t>(std::min(slowest.size(), b + step)));
        const Stats st = summarize(part);
        std::printf(" %.1f/%.1f", st.median, st.p90);
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  const std::vector<std::int64_t> rss = report_peak_rss();
  if (kolo::rank() == 0 && !a.json.empty()) {
    write_json(a.json, {{"ranks", n},
                        {"bytes", 4},
                        {"iters", a.iters},
                        {"time_us_median", s.median},
                        {"time_us_p10", s.p10},
                        {"time_us_p90", s.p90},
                        {"rank0_time_us_median", own.median},
                        {"peak_rss_kib", rss},
                        {"timing", "max over ranks per iteration"}});
  }
  return 0;
}

}  // namespace kolo_bench
