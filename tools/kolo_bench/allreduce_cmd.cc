// `kolo_bench allreduce`: allreduce bandwidth over a sweep of message sizes.
//
// For each size, every rank runs back-to-back in-place allreduces of one buffer under one
// name (so that after the first negotiation the response cache's fast path is taken), with
// no barrier between iterations. An iteration's time is the wall time from submit to
// Handle::wait() returning on one rank; the reported time of an iteration is the maximum
// over ranks (an allreduce(kMax) of the per-iteration times after the loop), and a row
// reports the median over iterations. Bandwidth is in GB/s (1e9 bytes/s):
// algbw = bytes / time, busbw = algbw * 2(n-1)/n.
//
// The buffer holds zeros while timed (sums stay zero, no overflow or subnormals); after
// the timed loop one more allreduce of ones checks the result.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "kolo_bench/bench_util.h"
#include "kolo_bench/commands.h"

namespace kolo_bench {

namespace {

struct Row {
  std::int64_t bytes;
  int iters;
  Stats us;  // per-iteration time, max over ranks
};

kolo::ReduceOp parse_op(const std::string& op) {
  if (op == "sum") return kolo::ReduceOp::kSum;
  if (op == "average") return kolo::ReduceOp::kAverage;
  throw std::invalid_argument("--op must be sum or average, not '" + op + "'");
}

// Message sizes: min, min*step, ... up to max, rounded to whole elements (at least one),
// without repeats.
std::vector<std::int64_t> sizes(const AllreduceArgs& a, std::size_t esize) {
  std::vector<std::int64_t> out;
  const auto e = static_cast<std::int64_t>(esize);
  for (std::int64_t b = a.min_bytes; b <= a.max_bytes; b *= a.step) {
    const std::int64_t bytes = std::max<std::int64_t>(1, b / e) * e;
    if (out.empty() || out.back() != bytes) out.push_back(bytes);
  }
  return out;
}

// Timed allreduces of `bytes` bytes of `buf`; returns rank 0's row (max over ranks).
Row measure(std::byte* buf, std::int64_t bytes, const AllreduceArgs& a, kolo::ReduceOp op) {
  const std::int64_t count = bytes / static_cast<std::int64_t>(kolo::dtype_size(a.dtype));
  const int iters = a.iters > 0 ? a.iters : default_iters(bytes);
  const int warmup = a.warmup >= 0 ? a.warmup : std::clamp(iters / 10, 2, 50);
  const kolo::TensorView v = view_of(buf, a.dtype, count);
  const kolo::AllreduceOptions opts{.name = "bench.allreduce." + std::to_string(bytes), .op = op};

  fill(buf, a.dtype, count, 0);
  for (int i = 0; i < warmup; ++i) kolo::allreduce_async(v, v, opts).wait();
  std::vector<double> us(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    kolo::allreduce_async(v, v, opts).wait();
    us[static_cast<std::size_t>(i)] = micros(t0, Clock::now());
  }
  const std::vector<double> slowest = max_over_ranks(us, "bench.times." + std::to_string(bytes));

  // Result check: ones everywhere reduce to `size` (sum) or 1 (average).
  fill(buf, a.dtype, count, 1);
  kolo::allreduce(v, v, {.name = "bench.check." + std::to_string(bytes), .op = op});
  const double want = op == kolo::ReduceOp::kSum ? kolo::size() : 1.0;
  for (std::int64_t i : {std::int64_t{0}, count / 2, count - 1}) {
    const double got = element(buf, a.dtype, i);
    if (got != want) {
      throw std::runtime_error("wrong allreduce result at element " + std::to_string(i) + " of " +
                               std::to_string(bytes) + " bytes: " + std::to_string(got) +
                               ", expected " + std::to_string(want));
    }
  }
  return {bytes, iters, summarize(slowest)};
}

}  // namespace

int default_iters(std::int64_t bytes) {
  const std::int64_t budget = 1ll << 30;
  return static_cast<int>(
      std::clamp<std::int64_t>(budget / std::max<std::int64_t>(bytes, 1), 5, 1000));
}

int run_allreduce(const AllreduceArgs& a) {
  const kolo::ReduceOp op = parse_op(a.op);
  if (a.step != 2 && a.step != 4) throw std::invalid_argument("--step must be 2 or 4");
  if (a.min_bytes < 1 || a.max_bytes < a.min_bytes) {
    throw std::invalid_argument("need 1 <= --min-bytes <= --max-bytes");
  }
  const int n = kolo::size();
  const bool root = kolo::rank() == 0;
  const std::vector<std::int64_t> list = sizes(a, kolo::dtype_size(a.dtype));
  // One buffer for the whole sweep, 64-byte aligned.
  const std::size_t cap = (static_cast<std::size_t>(list.back()) + 63) / 64 * 64;
  std::unique_ptr<std::byte[], void (*)(std::byte*)> buf(
      static_cast<std::byte*>(::operator new[](cap, std::align_val_t{64})),
      [](std::byte* p) { ::operator delete[](p, std::align_val_t{64}); });

  if (root) {
    std::printf(
        "kolo allreduce: %d ranks, dtype %s, op %s, in place, same name per size; time = "
        "max over ranks per iteration, median over iterations\n",
        n, short_dtype_name(a.dtype), a.op.c_str());
    std::printf("%12s %7s %12s %12s %12s %10s %10s\n", "bytes", "iters", "median_us", "p10_us",
                "p90_us", "algbw_GB/s", "busbw_GB/s");
    std::fflush(stdout);
  }
  // Start-up noise (launcher processes, first negotiation, page faults of the runtime's
  // buffers) stays out of the first row: a few hundred small allreduces first.
  {
    float x = 0;
    const kolo::TensorView w = view_of(&x, kolo::DataType::kFloat32, 1);
    for (int i = 0; i < 300; ++i) kolo::allreduce_async(w, w, {.name = "bench.warmup"}).wait();
  }
  nlohmann::json rows = nlohmann::json::array();
  for (std::int64_t bytes : list) {
    const Row r = measure(buf.get(), bytes, a, op);
    const double alg = gbps(static_cast<double>(bytes), r.us.median);
    const double bus = busbw(alg, n);
    if (root) {
      std::printf("%12lld %7d %12.2f %12.2f %12.2f %10.3f %10.3f\n", static_cast<long long>(bytes),
                  r.iters, r.us.median, r.us.p10, r.us.p90, alg, bus);
      std::fflush(stdout);
    }
    rows.push_back({{"bytes", bytes},
                    {"dtype", short_dtype_name(a.dtype)},
                    {"ranks", n},
                    {"op", a.op},
                    {"iters", r.iters},
                    {"time_us_median", r.us.median},
                    {"time_us_p10", r.us.p10},
                    {"time_us_p90", r.us.p90},
                    {"algbw_gbps", alg},
                    {"busbw_gbps", bus},
                    {"timing", "max over ranks per iteration"}});
  }
  buf.reset();
  report_peak_rss();
  if (root && !a.json.empty()) write_json(a.json, rows);
  return 0;
}

}  // namespace kolo_bench
