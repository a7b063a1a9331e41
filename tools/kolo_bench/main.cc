// kolo_bench: microbenchmarks of kolo's runtime through its public API, run under a
// launcher on every rank:
//
//   kolorun -np 2 kolo_bench allreduce --min-bytes 4 --max-bytes 256M [--dtype f32]
//                                      [--step 2|4] [--iters N] [--json FILE]
//   kolorun -np 2 kolo_bench gradients --model resnet50|bert-base [--iters N] [--json FILE]
//   kolorun -np 2 kolo_bench latency [--iters N] [--json FILE]
//
// Rank 0 prints the results (and writes --json); every subcommand ends with each rank's
// peak RSS. Peers measured the same way live in bench/peers/, and bench/compare.sh runs
// them side by side. Not a test of correctness beyond a result check per size.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "kolo/kolo.h"
#include "kolo_bench/bench_util.h"
#include "kolo_bench/commands.h"

namespace {

using kolo_bench::AllreduceArgs;
using kolo_bench::GradientsArgs;
using kolo_bench::LatencyArgs;

void add_allreduce(CLI::App& app, AllreduceArgs& a, std::string& dtype) {
  auto* c = app.add_subcommand("allreduce", "allreduce bandwidth over a sweep of sizes");
  c->add_option("--min-bytes", a.min_bytes, "smallest message (bytes; K/M/G suffixes = 1024^k)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  c->add_option("--max-bytes", a.max_bytes, "largest message")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  c->add_option("--dtype", dtype, "element type")
      ->check(CLI::IsMember(kolo_bench::dtype_choices()))
      ->capture_default_str();
  c->add_option("--step", a.step, "size multiplier between rows")
      ->check(CLI::IsMember({2, 4}))
      ->capture_default_str();
  c->add_option("--iters", a.iters,
                "timed iterations per size; default: ~1 GiB per size, between 5 and 1000");
  c->add_option("--warmup", a.warmup, "untimed iterations per size; default iters/10 in [2, 50]");
  c->add_option("--op", a.op, "reduction")
      ->check(CLI::IsMember({"sum", "average"}))
      ->capture_default_str();
  c->add_option("--json", a.json, "write the rows to this file (rank 0)");
}

void add_gradients(CLI::App& app, GradientsArgs& a) {
  auto* c =
      app.add_subcommand("gradients", "one step's gradient allreduces of a model vs one allreduce");
  c->add_option("--model", a.model, "parameter shapes to use")
      ->check(CLI::IsMember({"resnet50", "bert-base"}))
      ->capture_default_str();
  c->add_option("--iters", a.iters, "timed steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--warmup", a.warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--json", a.json, "write the summary to this file (rank 0)");
}

void add_latency(CLI::App& app, LatencyArgs& a) {
  auto* c = app.add_subcommand("latency", "round trip of a 4-byte allreduce");
  c->add_option("--iters", a.iters, "timed iterations")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--warmup", a.warmup, "untimed iterations first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option(
       "--series", a.series,
       "also print the median and p90 of every N iterations in order (when the tail comes)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--json", a.json, "write the summary to this file (rank 0)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kolo_bench: kolo runtime microbenchmarks (run under kolorun or mpirun)"};
  app.require_subcommand(1);
  AllreduceArgs allreduce;
  GradientsArgs gradients;
  LatencyArgs latency;
  std::string dtype = "f32";
  add_allreduce(app, allreduce, dtype);
  add_gradients(app, gradients);
  add_latency(app, latency);
  CLI11_PARSE(app, argc, argv);
  kolo_bench::parse_dtype(dtype, &allreduce.dtype);

  int rc = 1;
  try {
    kolo::init();
    if (app.got_subcommand("allreduce")) rc = kolo_bench::run_allreduce(allreduce);
    if (app.got_subcommand("gradients")) rc = kolo_bench::run_gradients(gradients);
    if (app.got_subcommand("latency")) rc = kolo_bench::run_latency(latency);
    kolo::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kolo_bench: %s\n", e.what());
    return 1;
  }
  return rc;
}
