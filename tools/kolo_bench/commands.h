// kolo_bench's subcommands: their options (filled by main.cc's CLI) and entry points.
// Each entry point runs after kolo::init() on every rank, prints its results on rank 0,
// ends with every rank's peak RSS, and returns the process exit status.
#pragma once

#include <cstdint>
#include <string>

#include "kolo/types.h"

namespace kolo_bench {

struct AllreduceArgs {
  std::int64_t min_bytes = 4;
  std::int64_t max_bytes = 256ll << 20;
  kolo::DataType dtype = kolo::DataType::kFloat32;
  int step = 2;     // size multiplier between rows (2 or 4)
  int iters = 0;    // timed iterations per size; 0 = by size (see default_iters)
  int warmup = -1;  // untimed iterations first; -1 = by size
  std::string op = "sum";
  std::string json;  // "" = no JSON file
};

struct GradientsArgs {
  std::string model = "resnet50";
  int iters = 10;
  int warmup = 2;
  std::string json;
};

struct LatencyArgs {
  int iters = 2000;
  int warmup = 200;
  int series = 0;  // > 0: also print the median and p90 of every `series` iterations
  std::string json;
};

int run_allreduce(const AllreduceArgs& args);
int run_gradients(const GradientsArgs& args);
int run_latency(const LatencyArgs& args);

// Timed iterations for one size when --iters is not given: enough to move ~1 GiB per
// rank, at least 5 and at most 1000 (a 4 B..256 MiB sweep at 2 ranks takes well under a
// minute on a 2-core machine).
int default_iters(std::int64_t bytes);

}  // namespace kolo_bench
