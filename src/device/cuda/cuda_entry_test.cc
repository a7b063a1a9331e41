// The CUDA entry of default_device.h (the device kolo::init() gives the runtime with
// KOLO_DEVICE_PATH): it says it is CUDA, and makes a device on a GPU or says why not.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "device/default_device.h"

namespace kolo::device {
namespace {

TEST(CudaEntry, MakesTheDeviceOfTheTensorsGpuOrSaysWhyNot) {
  EXPECT_STREQ(default_device_kind(), "cuda");
  int count = 0;
  const bool gpus = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  std::unique_ptr<Device> dev;
  // -1: local_rank modulo the GPUs (as kolo::device()).
  Status s = make_default_device({.index = -1, .local_rank = 3, .timeout_seconds = 5}, &dev);
  if (!gpus) {
    EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.message();
    EXPECT_NE(s.message().find("no CUDA device"), std::string::npos) << s.message();
    EXPECT_EQ(dev, nullptr);
    return;
  }
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(dev->name(), "cuda:" + std::to_string(3 % count));
  s = make_default_device({.index = count, .local_rank = 0, .timeout_seconds = 5}, &dev);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.message();
}

}  // namespace
}  // namespace kolo::device
