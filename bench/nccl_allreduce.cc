// kolo_bench_nccl: kolo's device collectives (src/device: the CUDA device and its NCCL
// communicator, made by connect_collectives) against raw NCCL calls on the same GPU, the
// same buffers and the same stream kind, one rank, in one run: what kolo's layer costs
// over NCCL itself (issue 29's "allreduce bus bandwidth against raw NCCL calls").
//
//   build/bin/kolo_bench_nccl [--min-bytes 4096] [--max-bytes 268435456] [--iters 20]
//
// Per size, float32 sum in place: warm-up, then `iters` calls back to back, timed to the
// stream's completion (an event), for kolo and raw NCCL in turn, three rounds; the median
// of the rounds. Prints time per call and algorithm bandwidth (bytes / time; at one rank
// NCCL's bus bandwidth factor 2(n-1)/n is 0) and kolo / NCCL. Needs a GPU (built with
// KOLO_CUDA; scripts/gpu_check.sh runs it).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "device/cuda/cuda_device.h"
#include "device/device.h"
#include "transport/inproc/inproc.h"

namespace {

using kolo::Status;
namespace device = kolo::device;

int fail(const std::string& what) {
  std::fprintf(stderr, "kolo_bench_nccl: %s\n", what.c_str());
  return 1;
}

#define CUDA_OK(call)                                                                     \
  do {                                                                                    \
    const cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) return fail(#call ": " + std::string(cudaGetErrorString(e_))); \
  } while (0)
#define NCCL_OK(call)                                                                     \
  do {                                                                                    \
    const ncclResult_t r_ = (call);                                                       \
    if (r_ != ncclSuccess) return fail(#call ": " + std::string(ncclGetErrorString(r_))); \
  } while (0)

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int run(int argc, char** argv) {
  std::size_t min_bytes = 4096, max_bytes = std::size_t{256} << 20;
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--min-bytes") {
      min_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--max-bytes") {
      max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--iters") {
      iters = std::atoi(argv[i + 1]);
    } else {
      return fail("usage: kolo_bench_nccl [--min-bytes N] [--max-bytes N] [--iters N]");
    }
  }
  if (min_bytes < 4 || max_bytes < min_bytes || iters < 1) return fail("bad sizes or iters");

  // kolo: the CUDA device, its stream and its collectives at one rank.
  std::unique_ptr<device::Device> dev;
  Status s = device::cuda::make_cuda_device({.index = 0, .timeout_seconds = 60}, &dev);
  std::unique_ptr<kolo::transport::Communicator> control = kolo::transport::InprocWorld::single();
  std::unique_ptr<device::Collectives> comm;
  std::unique_ptr<device::Stream> stream;
  std::unique_ptr<device::Event> done;
  if (s.ok()) s = dev->create_stream(&stream);
  if (s.ok()) s = dev->create_event(&done);
  if (s.ok()) s = device::connect_collectives(*dev, *control, kolo::deadline_after(60), &comm);
  if (!s.ok()) return fail("kolo's device: " + s.to_string());

  // Raw NCCL: its own communicator and a non-blocking stream, as kolo's.
  CUDA_OK(cudaSetDevice(0));
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t raw;
  NCCL_OK(ncclCommInitRank(&raw, 1, id, 0));
  cudaStream_t raw_stream;
  CUDA_OK(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking));
  cudaEvent_t raw_done;
  CUDA_OK(cudaEventCreateWithFlags(&raw_done, cudaEventDisableTiming));

  void* buf = nullptr;
  CUDA_OK(cudaMalloc(&buf, max_bytes));
  CUDA_OK(cudaMemset(buf, 0, max_bytes));
  std::printf("%12s %12s %12s %12s %12s %8s\n", "bytes", "kolo_us", "nccl_us", "kolo_GB/s",
              "nccl_GB/s", "ratio");
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = bytes / 4;
    auto time_kolo = [&]() -> double {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        if (!comm->allreduce(buf, buf, count, kolo::DataType::kFloat32, kolo::ReduceOp::kSum,
                             *stream)
                 .ok()) {
          return -1;
        }
      }
      if (!dev->record(*done, *stream).ok() ||
          !dev->synchronize(*done, kolo::deadline_after(60)).ok()) {
        return -1;
      }
      return seconds(t0, std::chrono::steady_clock::now()) / iters;
    };
    auto time_raw = [&]() -> double {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        if (ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, raw, raw_stream) != ncclSuccess) {
          return -1;
        }
      }
      if (cudaEventRecord(raw_done, raw_stream) != cudaSuccess ||
          cudaEventSynchronize(raw_done) != cudaSuccess) {
        return -1;
      }
      return seconds(t0, std::chrono::steady_clock::now()) / iters;
    };
    if (time_kolo() < 0 || time_raw() < 0) return fail("warm-up failed");  // warm-up
    std::vector<double> k, r;
    for (int round = 0; round < 3; ++round) {
      k.push_back(time_kolo());
      r.push_back(time_raw());
      if (k.back() < 0 || r.back() < 0) return fail("an allreduce failed");
    }
    std::sort(k.begin(), k.end());
    std::sort(r.begin(), r.end());
    const double tk = k[1], tr = r[1];
    std::printf("%12zu %12.2f %12.2f %12.2f %12.2f %8.3f\n", bytes, tk * 1e6, tr * 1e6,
                static_cast<double>(bytes) / tk / 1e9, static_cast<double>(bytes) / tr / 1e9,
                tr / tk);
    std::fflush(stdout);
  }
  cudaFree(buf);
  ncclCommDestroy(raw);
  cudaStreamDestroy(raw_stream);
  cudaEventDestroy(raw_done);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
