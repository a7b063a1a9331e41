// The request builder (core/request_builder.h): what it fills in, and that bad arguments
// come back as a Status naming the operation and the tensor, without throwing.
#include "core/request_builder.h"

#include <gtest/gtest.h>

#include <vector>

namespace kolo::core {
namespace {

TensorView view(std::vector<float>& v, std::vector<std::int64_t> shape) {
  TensorView t;
  t.data = v.data();
  t.dtype = DataType::kFloat32;
  t.shape = std::move(shape);
  return t;
}

TEST(RequestBuilderTest, AllreduceCarriesShapesOptionsAndWireDtype) {
  std::vector<float> a(6), b(2);
  AllreduceOptions o;
  o.op = ReduceOp::kMax;
  o.prescale_factor = 0.5;
  o.postscale_factor = 4;
  o.compression = Compression::kFP16;
  Request r;
  ASSERT_TRUE(allreduce_request({view(a, {2, 3}), view(b, {2})}, {view(a, {6}), view(b, {2})}, o,
                                true, "g", &r)
                  .ok());
  EXPECT_EQ(r.op, OpType::kAllreduce);
  EXPECT_EQ(r.name, "g");
  EXPECT_EQ(r.shapes, (std::vector<Shape>{{2, 3}, {2}}));
  EXPECT_EQ(r.reduce_op, ReduceOp::kMax);
  EXPECT_EQ(r.prescale, 0.5);
  EXPECT_EQ(r.postscale, 4);
  EXPECT_EQ(r.wire_dtype, DataType::kFloat16);
}

TEST(RequestBuilderTest, BadArgumentsAreAStatusNamingTheTensor) {
  std::vector<float> a(6);
  Request r;
  Status s = allreduce_request({view(a, {6})}, {}, {}, false, "w", &r);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("allreduce 'w': got 1 inputs and 0 outputs"), std::string::npos)
      << s.message();
  s = allreduce_request({view(a, {6})}, {view(a, {5})}, {}, true, "w", &r);
  EXPECT_NE(s.message().find("grouped allreduce 'w': output float32[5] does not match input"),
            std::string::npos)
      << s.message();
  s = allreduce_request({view(a, {6}), view(a, {2, -3})}, {view(a, {6}), view(a, {6})}, {}, true,
                        "g", &r);
  EXPECT_NE(s.message().find("grouped allreduce 'g' input 1 has a negative dimension [2, -3]"),
            std::string::npos)
      << s.message();
  s = allgather_request(view(a, {-2, 3}), {}, "e", &r);
  EXPECT_NE(s.message().find("allgather 'e' tensor has a negative dimension"), std::string::npos)
      << s.message();
  TensorView null_data = view(a, {6});
  null_data.data = nullptr;
  s = broadcast_request(null_data, {}, "p", &r);
  EXPECT_NE(s.message().find("6 elements but a null data pointer"), std::string::npos)
      << s.message();
  BroadcastOptions other_set;
  other_set.process_set = -1;
  s = broadcast_request(view(a, {6}), other_set, "p", &r);
  EXPECT_NE(s.message().find("process set -1 does not exist"), std::string::npos) << s.message();
}

TEST(RequestBuilderTest, FixedNamesAndPerOpFields) {
  std::vector<float> a(4);
  Request r;
  ASSERT_TRUE(barrier_request({}, &r).ok());
  EXPECT_EQ(r.name, "barrier");
  EXPECT_TRUE(r.shapes.empty());
  EXPECT_EQ(join_request().name, "join");
  BroadcastOptions b;
  b.root = 1;
  ASSERT_TRUE(broadcast_request(view(a, {4}), b, "x", &r).ok());
  EXPECT_EQ(r.root, 1);
  AlltoallOptions t;
  t.splits = {1, 3};
  ASSERT_TRUE(alltoall_request(view(a, {4}), t, "x", &r).ok());
  EXPECT_EQ(r.splits, (std::vector<std::int64_t>{1, 3}));
}

}  // namespace
}  // namespace kolo::core
