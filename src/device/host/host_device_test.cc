// The host stand-in's streams, events and kernels (host_device.h): CUDA's ordering rules,
// bounded waits, sticky errors.
#include "device/host/host_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <vector>

#include "common/reduce.h"

namespace kolo::device::host {
namespace {

using namespace std::chrono_literals;

struct Fixture {
  explicit Fixture(double timeout = 60) : dev(make_host_device({.timeout_seconds = timeout})) {}
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
  std::unique_ptr<Device> dev;
};

// A gate that a stream's work waits at (bounded) until the test opens it.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  std::function<void()> wait() {
    return [f = opened] { f.wait_for(10s); };
  }
};

TEST(HostDevice, AStreamRunsItsWorkInOrder) {
  Fixture f;
  auto s = f.stream();
  auto e = f.event();
  std::vector<int> seen;  // written by the stream's thread only, read after synchronize
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(f.dev->host_function(*s, [&, i] { seen.push_back(i); }).ok());
  ASSERT_TRUE(f.dev->record(*e, *s).ok());
  ASSERT_TRUE(f.dev->synchronize(*e, deadline_after(10)).ok());
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], i);
}

// The consumer's stream waits for the producer's event; the host waits for neither.
TEST(HostDevice, AnEventOrdersTwoStreamsWithoutTheHostWaiting) {
  Fixture f;
  auto producer = f.stream(), consumer = f.stream();
  auto produced = f.event(), consumed = f.event();
  Gate gate;
  std::atomic<int> value{0};
  int seen = -1;
  ASSERT_TRUE(f.dev->host_function(*producer, gate.wait()).ok());
  ASSERT_TRUE(f.dev->host_function(*producer, [&] { value = 42; }).ok());
  ASSERT_TRUE(f.dev->record(*produced, *producer).ok());
  ASSERT_TRUE(f.dev->wait_event(*consumer, *produced).ok());
  ASSERT_TRUE(f.dev->host_function(*consumer, [&] { seen = value; }).ok());
  ASSERT_TRUE(f.dev->record(*consumed, *consumer).ok());
  // Every call above returned while the producer is held at the gate.
  bool done = true;
  ASSERT_TRUE(f.dev->query(*consumed, &done).ok());
  EXPECT_FALSE(done);
  ASSERT_TRUE(f.dev->query(*produced, &done).ok());
  EXPECT_FALSE(done);
  gate.open.set_value();
  ASSERT_TRUE(f.dev->synchronize(*consumed, deadline_after(10)).ok());
  EXPECT_EQ(seen, 42);
  ASSERT_TRUE(f.dev->query(*produced, &done).ok());
  EXPECT_TRUE(done);
}

// A later record() moves the event: a wait made before it waits for the earlier point.
TEST(HostDevice, AWaitUsesTheEventAsLastRecordedWhenItIsMade) {
  Fixture f;
  auto a = f.stream(), b = f.stream();
  auto e = f.event(), b_done = f.event();
  Gate gate;
  ASSERT_TRUE(f.dev->record(*e, *a).ok());  // before the gate
  ASSERT_TRUE(f.dev->host_function(*a, gate.wait()).ok());
  ASSERT_TRUE(f.dev->wait_event(*b, *e).ok());
  ASSERT_TRUE(f.dev->record(*e, *a).ok());  // after the gate: not what b waits for
  ASSERT_TRUE(f.dev->record(*b_done, *b).ok());
  EXPECT_TRUE(f.dev->synchronize(*b_done, deadline_after(10)).ok());
  bool done = true;
  ASSERT_TRUE(f.dev->query(*e, &done).ok());
  EXPECT_FALSE(done);
  gate.open.set_value();
  EXPECT_TRUE(f.dev->synchronize(*e, deadline_after(10)).ok());
}

TEST(HostDevice, AnEventNeverRecordedIsComplete) {
  Fixture f;
  auto s = f.stream();
  auto e = f.event(), after = f.event();
  bool done = false;
  ASSERT_TRUE(f.dev->query(*e, &done).ok());
  EXPECT_TRUE(done);
  EXPECT_TRUE(f.dev->synchronize(*e, deadline_after(0)).ok());
  ASSERT_TRUE(f.dev->wait_event(*s, *e).ok());
  ASSERT_TRUE(f.dev->record(*after, *s).ok());
  EXPECT_TRUE(f.dev->synchronize(*after, deadline_after(10)).ok());
}

TEST(HostDevice, TheHostsWaitEndsAtItsDeadlineNamingTheDevice) {
  Fixture f;
  auto s = f.stream();
  auto e = f.event();
  Gate gate;
  ASSERT_TRUE(f.dev->host_function(*s, gate.wait()).ok());
  ASSERT_TRUE(f.dev->record(*e, *s).ok());
  const auto start = Clock::now();
  const Status st = f.dev->synchronize(*e, deadline_after(0.05));
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(st.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(st.message().find("host stand-in 0"), std::string::npos) << st.message();
  gate.open.set_value();
  EXPECT_TRUE(f.dev->synchronize(*e, deadline_after(10)).ok());
}

// A stream's wait for an event that does not complete within the device's timeout fails
// that stream; the error is sticky: its later work is skipped and its later events report
// the same error.
TEST(HostDevice, AStreamsWaitIsBoundedAndItsFailureIsSticky) {
  Fixture f(/*timeout=*/0.1);
  auto held = f.stream(), waiting = f.stream();
  auto e = f.event(), after = f.event(), later = f.event();
  Gate gate;
  ASSERT_TRUE(f.dev->host_function(*held, gate.wait()).ok());
  ASSERT_TRUE(f.dev->record(*e, *held).ok());
  ASSERT_TRUE(f.dev->wait_event(*waiting, *e).ok());
  bool ran = false;
  ASSERT_TRUE(f.dev->host_function(*waiting, [&] { ran = true; }).ok());
  ASSERT_TRUE(f.dev->record(*after, *waiting).ok());
  const Status st = f.dev->synchronize(*after, deadline_after(10));
  EXPECT_EQ(st.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(st.message().find("wait for an event"), std::string::npos) << st.message();
  ASSERT_TRUE(f.dev->record(*later, *waiting).ok());
  EXPECT_EQ(f.dev->synchronize(*later, deadline_after(10)).message(), st.message());
  bool done = false;
  EXPECT_EQ(f.dev->query(*later, &done).code(), ErrorCode::kPeerFailure);
  EXPECT_TRUE(done);
  EXPECT_FALSE(ran);
  gate.open.set_value();
}

// The fusion kernels give the CPU kernels' values: pack with a prescale into float16,
// reduce, unpack with a divisor back to float32.
TEST(HostDevice, KernelsGiveTheCpuReferencesValues) {
  Fixture f;
  auto s = f.stream();
  auto e = f.event();
  const std::size_t n = 1000;
  std::vector<float> a(n), b(n), out(n), want(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 17) * 0.25f;
    b[i] = static_cast<float>(i % 5) - 2.0f;
  }
  void* da = nullptr;
  void* db = nullptr;
  ASSERT_TRUE(f.dev->allocate(n * 2, &da).ok());
  ASSERT_TRUE(f.dev->allocate(n * 2, &db).ok());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(da) % 256, 0u);
  ASSERT_TRUE(
      f.dev->convert(da, DataType::kFloat16, a.data(), DataType::kFloat32, n, 2.0, 1.0, *s).ok());
  ASSERT_TRUE(
      f.dev->convert(db, DataType::kFloat16, b.data(), DataType::kFloat32, n, 2.0, 1.0, *s).ok());
  ASSERT_TRUE(f.dev->reduce(da, db, n, DataType::kFloat16, ReduceOp::kSum, *s).ok());
  ASSERT_TRUE(
      f.dev->convert(out.data(), DataType::kFloat32, da, DataType::kFloat16, n, 1.0, 4.0, *s).ok());
  ASSERT_TRUE(f.dev->record(*e, *s).ok());
  ASSERT_TRUE(f.dev->synchronize(*e, deadline_after(10)).ok());
  for (std::size_t i = 0; i < n; ++i) {
    const float ha = half_to_float(float_to_half(a[i] * 2)),
                hb = half_to_float(float_to_half(b[i] * 2));
    want[i] = half_to_float(float_to_half(ha + hb)) / 4;
    ASSERT_EQ(out[i], want[i]) << i;
  }
  std::vector<char> copied(n * 2);
  ASSERT_TRUE(f.dev->copy(copied.data(), da, n * 2, *s).ok());
  ASSERT_TRUE(f.dev->record(*e, *s).ok());
  ASSERT_TRUE(f.dev->synchronize(*e, deadline_after(10)).ok());
  EXPECT_EQ(std::memcmp(copied.data(), da, n * 2), 0);
  f.dev->release(da);
  f.dev->release(db);
}

TEST(HostDevice, BadKernelArgumentsAreRefusedWhenEnqueued) {
  Fixture f;
  auto s = f.stream();
  float x = 0;
  std::int32_t y = 0;
  Status st = f.dev->convert(&y, DataType::kInt32, &x, DataType::kFloat32, 1, 1, 1, *s);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("float32 to int32"), std::string::npos) << st.message();
  st = f.dev->reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kAverage, *s);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kolo::device::host
