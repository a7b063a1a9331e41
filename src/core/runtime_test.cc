// Runtime behaviour over the inproc transport: ordering, cache, handles, shutdown.
#include "core/runtime.h"

#include <algorithm>
#include <numeric>

#include "core/testing/ranks.h"

namespace kolo::core {
namespace {

using testing::run_ranks;
using testing::test_config;
using testing::view_of;

TEST(RuntimeTest, AllreduceSumOnThreeRanks) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    std::vector<float> v(5, static_cast<float>(rank + 1));
    AllreduceOptions o;
    o.name = "x";
    o.op = ReduceOp::kSum;
    rt.allreduce({view_of(v, DataType::kFloat32)}, {view_of(v, DataType::kFloat32)}, o, false).wait();
    for (float x : v) EXPECT_EQ(x, 6.0f);
  });
}

}  // namespace
}  // namespace kolo::core
