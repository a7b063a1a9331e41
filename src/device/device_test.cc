// The device layer's streams, events and kernels (device.h), the same checks on every
// device this build has (testing/test_devices.h): CUDA's ordering rules, bounded host
// waits, the kernels' values against the CPU kernels.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <vector>

#include "common/convert.h"
#include "common/reduce.h"
#include "device/testing/test_devices.h"

namespace kolo::device {
namespace {

using namespace std::chrono_literals;
using testing::TestDevice;

class DeviceTest : public ::testing::TestWithParam<TestDevice> {
 protected:
  void SetUp() override {
    const Status st = GetParam().make(0, 60, nullptr, &dev);
    if (st.code() == ErrorCode::kUnsupported) GTEST_SKIP() << st.message();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  std::unique_ptr<Stream> stream() {
    std::unique_ptr<Stream> s;
    EXPECT_TRUE(dev->create_stream(&s).ok());
    return s;
  }
  std::unique_ptr<Event> event() {
    std::unique_ptr<Event> e;
    EXPECT_TRUE(dev->create_event(&e).ok());
    return e;
  }
  // Waits for everything enqueued on `s` so far.
  void finish(Stream& s) {
    auto e = event();
    ASSERT_TRUE(dev->record(*e, s).ok());
    const Status st = dev->synchronize(*e, deadline_after(20));
    ASSERT_TRUE(st.ok()) << st.message();
  }
  std::unique_ptr<Device> dev;
};

// Device memory that frees itself.
struct Buffer {
  Buffer(Device& d, std::size_t bytes) : dev(d) { EXPECT_TRUE(d.allocate(bytes, &ptr).ok()); }
  ~Buffer() { dev.release(ptr); }
  Device& dev;
  void* ptr = nullptr;
};

// A gate that a stream's host function waits at (bounded) until the test opens it.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  std::function<void()> wait() {
    return [f = opened] { f.wait_for(10s); };
  }
};

TEST_P(DeviceTest, AStreamRunsItsWorkInOrder) {
  auto s = stream();
  std::vector<int> seen;  // written by the host functions only, read after the stream
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(dev->host_function(*s, [&, i] { seen.push_back(i); }).ok());
  finish(*s);
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], i);
}

// The consumer's stream waits for the producer's event; the host waits for neither.
TEST_P(DeviceTest, AnEventOrdersTwoStreamsWithoutTheHostWaiting) {
  auto producer = stream(), consumer = stream();
  auto produced = event(), consumed = event();
  Gate gate;
  std::atomic<int> value{0};
  int seen = -1;
  ASSERT_TRUE(dev->host_function(*producer, gate.wait()).ok());
  ASSERT_TRUE(dev->host_function(*producer, [&] { value = 42; }).ok());
  ASSERT_TRUE(dev->record(*produced, *producer).ok());
  ASSERT_TRUE(dev->wait_event(*consumer, *produced).ok());
  ASSERT_TRUE(dev->host_function(*consumer, [&] { seen = value; }).ok());
  ASSERT_TRUE(dev->record(*consumed, *consumer).ok());
  // Every call above returned while the producer is held at the gate.
  bool done = true;
  ASSERT_TRUE(dev->query(*consumed, &done).ok());
  EXPECT_FALSE(done);
  ASSERT_TRUE(dev->query(*produced, &done).ok());
  EXPECT_FALSE(done);
  gate.open.set_value();
  ASSERT_TRUE(dev->synchronize(*consumed, deadline_after(20)).ok());
  EXPECT_EQ(seen, 42);
  ASSERT_TRUE(dev->query(*produced, &done).ok());
  EXPECT_TRUE(done);
}

// An event known only by the device's own handle (how a framework's CUDA event reaches
// kolo, TensorView::ready_event) orders two streams as wait_event() does.
TEST_P(DeviceTest, ANativeEventOrdersTwoStreams) {
  auto producer = stream(), consumer = stream();
  auto produced = event(), consumed = event();
  Gate gate;
  std::atomic<int> value{0};
  int seen = -1;
  ASSERT_TRUE(dev->host_function(*producer, gate.wait()).ok());
  ASSERT_TRUE(dev->host_function(*producer, [&] { value = 7; }).ok());
  ASSERT_TRUE(dev->record(*produced, *producer).ok());
  void* native = dev->native_event(*produced);
  ASSERT_NE(native, nullptr);
  ASSERT_TRUE(dev->wait_native_event(*consumer, native).ok());
  ASSERT_TRUE(dev->host_function(*consumer, [&] { seen = value; }).ok());
  ASSERT_TRUE(dev->record(*consumed, *consumer).ok());
  bool done = true;
  ASSERT_TRUE(dev->query(*consumed, &done).ok());
  EXPECT_FALSE(done);
  gate.open.set_value();
  ASSERT_TRUE(dev->synchronize(*consumed, deadline_after(20)).ok());
  EXPECT_EQ(seen, 7);
  const Status null = dev->wait_native_event(*consumer, nullptr);
  EXPECT_EQ(null.code(), ErrorCode::kInvalidArgument) << null.message();
}

// A later record() moves the event: a wait made before it waits for the earlier point.
TEST_P(DeviceTest, AWaitUsesTheEventAsLastRecordedWhenItIsMade) {
  auto a = stream(), b = stream();
  auto e = event(), b_done = event();
  Gate gate;
  ASSERT_TRUE(dev->record(*e, *a).ok());  // before the gate
  ASSERT_TRUE(dev->host_function(*a, gate.wait()).ok());
  ASSERT_TRUE(dev->wait_event(*b, *e).ok());
  ASSERT_TRUE(dev->record(*e, *a).ok());  // after the gate: not what b waits for
  ASSERT_TRUE(dev->record(*b_done, *b).ok());
  EXPECT_TRUE(dev->synchronize(*b_done, deadline_after(20)).ok());
  bool done = true;
  ASSERT_TRUE(dev->query(*e, &done).ok());
  EXPECT_FALSE(done);
  gate.open.set_value();
  EXPECT_TRUE(dev->synchronize(*e, deadline_after(20)).ok());
}

TEST_P(DeviceTest, AnEventNeverRecordedIsComplete) {
  auto s = stream();
  auto e = event();
  bool done = false;
  ASSERT_TRUE(dev->query(*e, &done).ok());
  EXPECT_TRUE(done);
  EXPECT_TRUE(dev->synchronize(*e, deadline_after(0)).ok());
  ASSERT_TRUE(dev->wait_event(*s, *e).ok());
  finish(*s);
}

TEST_P(DeviceTest, TheHostsWaitEndsAtItsDeadlineNamingTheDevice) {
  auto s = stream();
  auto e = event();
  Gate gate;
  ASSERT_TRUE(dev->host_function(*s, gate.wait()).ok());
  ASSERT_TRUE(dev->record(*e, *s).ok());
  const auto start = Clock::now();
  const Status st = dev->synchronize(*e, deadline_after(0.05));
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(st.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(st.message().find(dev->name()), std::string::npos) << st.message();
  gate.open.set_value();
  EXPECT_TRUE(dev->synchronize(*e, deadline_after(20)).ok());
}

// The fusion kernels give the CPU kernels' values: pack with a prescale into float16 and
// bfloat16, reduce, unpack with a divisor; integers scaled with truncation; every reduce
// op of every dtype.
TEST_P(DeviceTest, KernelsGiveTheCpuKernelsValues) {
  auto s = stream();
  const std::size_t n = 1000;
  std::vector<float> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 17) * 0.25f;
    b[i] = static_cast<float>(i % 5) - 2.0f;
  }
  for (DataType wire : {DataType::kFloat16, DataType::kBFloat16}) {
    Buffer in(*dev, n * 4), da(*dev, n * 2), db(*dev, n * 2), out(*dev, n * 4);
    std::vector<float> got(n);
    ASSERT_TRUE(dev->copy(in.ptr, a.data(), n * 4, *s).ok());
    ASSERT_TRUE(dev->convert(da.ptr, wire, in.ptr, DataType::kFloat32, n, 2.0, 1.0, *s).ok());
    finish(*s);  // `in` is reused below
    ASSERT_TRUE(dev->copy(in.ptr, b.data(), n * 4, *s).ok());
    ASSERT_TRUE(dev->convert(db.ptr, wire, in.ptr, DataType::kFloat32, n, 2.0, 1.0, *s).ok());
    ASSERT_TRUE(dev->reduce(da.ptr, db.ptr, n, wire, ReduceOp::kSum, *s).ok());
    ASSERT_TRUE(dev->convert(out.ptr, DataType::kFloat32, da.ptr, wire, n, 1.0, 4.0, *s).ok());
    ASSERT_TRUE(dev->copy(got.data(), out.ptr, n * 4, *s).ok());
    finish(*s);
    // The CPU kernels on the same input.
    std::vector<std::uint16_t> ha(n), hb(n);
    std::vector<float> want(n);
    convert_scaled(a.data(), DataType::kFloat32, ha.data(), wire, n, 2.0, 1.0);
    convert_scaled(b.data(), DataType::kFloat32, hb.data(), wire, n, 2.0, 1.0);
    reduce_into(ha.data(), hb.data(), n, wire, ReduceOp::kSum);
    convert_scaled(ha.data(), wire, want.data(), DataType::kFloat32, n, 1.0, 4.0);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << dtype_name(wire) << " " << i;
  }
  // Every dtype and op of reduce, and the same-dtype scale (an average's divisor).
  for (DataType t :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
        DataType::kInt8, DataType::kUInt8, DataType::kInt32, DataType::kInt64, DataType::kBool}) {
    const std::size_t bytes = n * dtype_size(t);
    std::vector<unsigned char> x(bytes), y(bytes);
    for (std::size_t i = 0; i < bytes; ++i) {
      x[i] = static_cast<unsigned char>((i * 7) % 5);
      y[i] = static_cast<unsigned char>((i * 3) % 4);
    }
    if (t == DataType::kBool) {  // bool bytes are 0 or 1
      for (auto& v : x) v &= 1;
      for (auto& v : y) v &= 1;
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      Buffer dx(*dev, bytes), dy(*dev, bytes);
      std::vector<unsigned char> got(bytes), want = x;
      ASSERT_TRUE(dev->copy(dx.ptr, x.data(), bytes, *s).ok());
      ASSERT_TRUE(dev->copy(dy.ptr, y.data(), bytes, *s).ok());
      ASSERT_TRUE(dev->reduce(dx.ptr, dy.ptr, n, t, op, *s).ok());
      ASSERT_TRUE(dev->copy(got.data(), dx.ptr, bytes, *s).ok());
      finish(*s);
      reduce_into(want.data(), y.data(), n, t, op);
      ASSERT_EQ(got, want) << dtype_name(t) << " " << reduce_op_name(op);
    }
    if (t == DataType::kBool) continue;
    Buffer dx(*dev, bytes);
    std::vector<unsigned char> got(bytes), want(bytes);
    ASSERT_TRUE(dev->copy(dx.ptr, x.data(), bytes, *s).ok());
    ASSERT_TRUE(dev->convert(dx.ptr, t, dx.ptr, t, n, 1.0, 3.0, *s).ok());
    ASSERT_TRUE(dev->copy(got.data(), dx.ptr, bytes, *s).ok());
    finish(*s);
    scale_into(want.data(), x.data(), n, t, 1.0, 3.0);
    ASSERT_EQ(got, want) << dtype_name(t) << " / 3";
  }
}

TEST_P(DeviceTest, BadKernelArgumentsAreRefusedWhenEnqueued) {
  auto s = stream();
  Buffer x(*dev, 64);
  Status st = dev->convert(x.ptr, DataType::kInt32, x.ptr, DataType::kFloat32, 1, 1, 1, *s);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("float32 to int32"), std::string::npos) << st.message();
  st = dev->reduce(x.ptr, x.ptr, 1, DataType::kFloat32, ReduceOp::kAverage, *s);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(x.ptr) % 256, 0u);
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceTest, ::testing::ValuesIn(testing::test_devices()),
                         [](const auto& info) { return info.param.kind; });

}  // namespace
}  // namespace kolo::device
