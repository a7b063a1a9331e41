// What only the host stand-in does (host_device.h): a stream's wait for an event has the
// device's timeout, and a stream's error is sticky.
#include "device/host/host_device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

namespace kolo::device::host {
namespace {

using namespace std::chrono_literals;

// A stream's wait for an event that does not complete within the device's timeout fails
// that stream; the error is sticky: its later work is skipped and its later events report
// the same error.
TEST(HostDevice, AStreamsWaitIsBoundedAndItsFailureIsSticky) {
  auto dev = make_host_device({.timeout_seconds = 0.1});
  std::unique_ptr<Stream> held, waiting;
  std::unique_ptr<Event> e, after, later;
  ASSERT_TRUE(dev->create_stream(&held).ok());
  ASSERT_TRUE(dev->create_stream(&waiting).ok());
  for (auto* ev : {&e, &after, &later}) ASSERT_TRUE(dev->create_event(ev).ok());
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  ASSERT_TRUE(dev->host_function(*held, [opened] { opened.wait_for(10s); }).ok());
  ASSERT_TRUE(dev->record(*e, *held).ok());
  ASSERT_TRUE(dev->wait_event(*waiting, *e).ok());
  bool ran = false;
  ASSERT_TRUE(dev->host_function(*waiting, [&] { ran = true; }).ok());
  ASSERT_TRUE(dev->record(*after, *waiting).ok());
  const Status st = dev->synchronize(*after, deadline_after(10));
  EXPECT_EQ(st.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(st.message().find("wait for an event"), std::string::npos) << st.message();
  ASSERT_TRUE(dev->record(*later, *waiting).ok());
  EXPECT_EQ(dev->synchronize(*later, deadline_after(10)).message(), st.message());
  bool done = false;
  EXPECT_EQ(dev->query(*later, &done).code(), ErrorCode::kPeerFailure);
  EXPECT_TRUE(done);
  EXPECT_FALSE(ran);
  open.set_value();
}

}  // namespace
}  // namespace kolo::device::host
