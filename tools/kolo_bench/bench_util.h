// Helpers shared by kolo_bench's subcommands: statistics over per-iteration times,
// cross-rank reductions of those times, dtype names, element encoding for the result
// check, peak-RSS reporting and JSON output.
//
// Everything here goes through kolo's public API only (kolo/kolo.h); it is benchmark
// plumbing, not a utility library for the runtime.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kolo/kolo.h"

namespace kolo_bench {

using Clock = std::chrono::steady_clock;

// Microseconds between two time points.
inline double micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Order statistics of a sample (all in the sample's unit).
struct Stats {
  double median = 0;
  double p10 = 0;
  double p90 = 0;
  double min = 0;
  double max = 0;
};
Stats summarize(std::vector<double> samples);

// result[i] = max over ranks of local[i]: the time of iteration i as the slowest rank saw
// it. One allreduce(kMax) named `name`; every rank must call it with the same length.
std::vector<double> max_over_ranks(const std::vector<double>& local, const std::string& name);

// A 1-d view of `count` elements at `data`.
kolo::TensorView view_of(void* data, kolo::DataType dtype, std::int64_t count);

// "f32", "f16", "bf16", "f64", "i32", "i64", "i8", "u8" <-> DataType.
bool parse_dtype(const std::string& text, kolo::DataType* out);
const char* short_dtype_name(kolo::DataType dtype);
// The names parse_dtype accepts, for --help and CLI11's validator.
std::vector<std::string> dtype_choices();

// Writes `value` (a small integer, exactly representable) into every element.
void fill(void* data, kolo::DataType dtype, std::int64_t count, double value);
// Element `i` as a double.
double element(const void* data, kolo::DataType dtype, std::int64_t i);

// Peak resident set size of this process in KiB (getrusage's ru_maxrss).
std::int64_t peak_rss_kib();
// Gathers every rank's peak RSS and prints it on rank 0 ("peak RSS rank r: N MiB").
// Returns the list (on every rank).
std::vector<std::int64_t> report_peak_rss();

// Writes `value` pretty-printed to `path`; throws std::runtime_error naming the path.
void write_json(const std::string& path, const nlohmann::json& value);

// GB/s (1e9 bytes per second) for `bytes` moved in `micros` microseconds.
inline double gbps(double bytes, double micros) { return micros > 0 ? bytes / micros / 1e3 : 0; }
// Bus bandwidth of an allreduce: algbw * 2(n-1)/n, the per-link traffic of a ring (NCCL's
// convention), so that numbers for different rank counts compare with the link speed.
inline double busbw(double algbw, int ranks) {
  return ranks > 1 ? algbw * 2.0 * (ranks - 1) / ranks : algbw;
}

}  // namespace kolo_bench
