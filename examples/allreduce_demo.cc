// A first look at kolo: every worker contributes a vector, kolo averages it across
// workers, broadcasts rank 0's "parameters" and gathers each worker's sample count.
//
//   kolorun -np 2 build/bin/allreduce_demo
#include <cstdio>
#include <numeric>
#include <vector>

#include "kolo/kolo.h"

namespace {
template <typename T>
kolo::TensorView view_of(std::vector<T>& v, kolo::DataType dtype) {
  kolo::TensorView t;
  t.data = v.data();
  t.dtype = dtype;
  t.shape = {static_cast<std::int64_t>(v.size())};
  return t;
}
}  // namespace

int main() {
  try {
    kolo::init();
    const int rank = kolo::rank(), size = kolo::size();
    std::printf("worker %d of %d (local %d of %d, host %d of %d)\n", rank, size, kolo::local_rank(),
                kolo::local_size(), kolo::cross_rank(), kolo::cross_size());

    // "Gradients": worker r holds r + 1 everywhere; the average is (size + 1) / 2.
    std::vector<float> grad(1 << 20, static_cast<float>(rank + 1));
    kolo::allreduce(view_of(grad, kolo::DataType::kFloat32), {.name = "grad"});

    // "Parameters": every worker ends with rank 0's values.
    std::vector<double> params(8, rank == 0 ? 3.14 : 0.0);
    kolo::broadcast(view_of(params, kolo::DataType::kFloat64), {.name = "params", .root = 0});

    // Uneven data: worker r has r + 1 samples; allgather concatenates them in rank order.
    std::vector<std::int32_t> samples(rank + 1, rank);
    kolo::Tensor all =
        kolo::allgather(view_of(samples, kolo::DataType::kInt32), {.name = "samples"});

    const float want = (size + 1) / 2.0f;
    const bool ok = grad.front() == want && grad.back() == want && params[7] == 3.14 &&
                    all.numel() == static_cast<std::int64_t>(size) * (size + 1) / 2;
    if (rank == 0) {
      std::printf(
          "average gradient %.3f (expected %.3f), broadcast parameter %.2f, %lld samples "
          "gathered\n",
          grad.front(), want, params[7], static_cast<long long>(all.numel()));
    }
    kolo::barrier();
    kolo::shutdown();
    if (!ok) {
      std::fprintf(stderr, "worker %d: wrong result\n", rank);
      return 1;
    }
    if (rank == 0) std::printf("allreduce demo OK on %d workers\n", size);
    return 0;
  } catch (const kolo::Error& e) {
    std::fprintf(stderr, "kolo error: %s\n", e.what());
    return 1;
  }
}
