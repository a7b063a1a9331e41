// The documented option style of include/kolo/kolo.h in user code: designated
// initializers naming only some fields must compile without warnings under -Wall -Wextra
// (this file is built with -Werror=missing-field-initializers; GCC 12 warned for every
// option struct field without a default member initializer). Also the error of a grouped
// allreduce that mixes dtypes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kolo/kolo.h"

namespace kolo {
namespace {

TEST(ApiOptionsTest, DocumentedDesignatedInitializersWork) {
  init();
  std::vector<float> a(4, 2.0f);
  TensorView v{a.data(), DataType::kFloat32, {4}};
  allreduce(v, {.op = ReduceOp::kSum});  // name left out: the first field
  allreduce(v, {.name = "x", .op = ReduceOp::kMax, .compression = Compression::kNone});
  broadcast(v, {.root = 0});
  AlltoallOptions all{.splits = {4}};
  Tensor t = alltoall(v, all).output;
  reducescatter(v, {.op = ReduceOp::kSum});
  AllgatherOptions g{.process_set = kGlobalProcessSet};
  Tensor gathered = allgather(v, g);
  EXPECT_EQ(gathered.numel(), 4);
  EXPECT_EQ(a[0], 2.0f);
  shutdown();
}

// kolo groups one dtype per request (Horovod allows mixed groups): the error says which
// tensor differs and what to do.
TEST(ApiOptionsTest, GroupedAllreduceWithMixedDtypesNamesTheTensor) {
  init();
  std::vector<float> f(4, 1.0f);
  std::vector<double> d(4, 1.0);
  const std::vector<TensorView> ins = {TensorView{f.data(), DataType::kFloat32, {4}},
                                       TensorView{d.data(), DataType::kFloat64, {4}}};
  try {
    grouped_allreduce(ins, ins, {.name = "mixed"});
    ADD_FAILURE() << "mixed dtypes accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("grouped allreduce 'mixed': tensor 1 is float64 on cpu "
                                         "but tensor 0 is float32 on cpu"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("one group per dtype"), std::string::npos) << e.what();
  }
  shutdown();
}

}  // namespace
}  // namespace kolo
