// The public free functions (include/kolo/kolo.h) in a process started without a
// launcher: one rank, the local transport.
#include <cstdlib>

#include <gtest/gtest.h>

#include "kolo/kolo.h"

namespace kolo {
namespace {

TensorView view(std::vector<float>& v) {
  TensorView t;
  t.data = v.data();
  t.dtype = DataType::kFloat32;
  t.shape = {static_cast<std::int64_t>(v.size())};
  return t;
}

void expect_not_initialized(const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotInitialized);
    EXPECT_NE(std::string(e.what()).find("kolo::init()"), std::string::npos) << e.what();
  }
}

TEST(ApiTest, EveryOperationBeforeInitAndAfterShutdownFailsClearly) {
  for (const char* v : {"KOLO_RANK", "KOLO_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "TF_CONFIG",
                        "RANK", "WORLD_SIZE", "SLURM_NTASKS"})
    unsetenv(v);
  std::vector<float> x(3, 1.0f);
  auto all_ops = [&] {
    expect_not_initialized([] { rank(); });
    expect_not_initialized([&] { allreduce(view(x)); });
    expect_not_initialized([&] { allgather(view(x)); });
    expect_not_initialized([&] { broadcast(view(x)); });
    expect_not_initialized([&] { alltoall(view(x)); });
    expect_not_initialized([&] { reducescatter(view(x)); });
    expect_not_initialized([] { barrier(); });
    expect_not_initialized([] { join(); });
  };
  ASSERT_FALSE(is_initialized());
  all_ops();

  init();
  init();  // a second init is a no-op
  ASSERT_TRUE(is_initialized());
  EXPECT_EQ(rank(), 0);
  EXPECT_EQ(size(), 1);
  EXPECT_EQ(local_rank(), 0);
  EXPECT_EQ(local_size(), 1);
  EXPECT_EQ(cross_rank(), 0);
  EXPECT_EQ(cross_size(), 1);
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  allreduce(view(x), sum);
  EXPECT_EQ(x[0], 1.0f);
  Tensor g = allgather(view(x));
  EXPECT_EQ(g.shape(), (std::vector<std::int64_t>{3}));
  AlltoallResult a = alltoall(view(x));
  EXPECT_EQ(a.received_splits, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(reducescatter(view(x)).numel(), 3);
  broadcast(view(x));
  barrier();
  EXPECT_EQ(join(), 0);

  shutdown();
  shutdown();  // idempotent
  EXPECT_FALSE(is_initialized());
  all_ops();
}

TEST(ApiTest, BadConfigurationIsReportedByInit) {
  setenv("KOLO_CACHE_CAPACITY", "lots", 1);
  try {
    init();
    ADD_FAILURE() << "init accepted KOLO_CACHE_CAPACITY=lots";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KOLO_CACHE_CAPACITY=lots"), std::string::npos)
        << e.what();
  }
  unsetenv("KOLO_CACHE_CAPACITY");
  EXPECT_FALSE(is_initialized());
}

}  // namespace
}  // namespace kolo
