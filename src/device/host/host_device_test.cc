// What only the host stand-in does (host_device.h): a stream's wait for an event has the
// device's timeout, and a stream's error is sticky.
#include "device/host/host_device.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "device/host/host_stream.h"

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

// Shared memory and events, as two processes would use them (two devices here: the
// stand-in keeps its shared state in POSIX shared memory, so a thread of another process
// and one of this process see it alike): the memory is the same bytes on both sides; a
// stream of the other device waits for the last record made before its wait_event(); the
// names disappear from /dev/shm once unpublished, so a crash leaves nothing behind.
TEST(HostDevice, SharedMemoryAndEventsWorkAcrossDevices) {
  auto owner = make_host_device({.index = 0, .timeout_seconds = 10});
  auto other = make_host_device({.index = 1, .timeout_seconds = 10});
  void* mine = nullptr;
  IpcHandle mem, ev;
  ASSERT_TRUE(owner->allocate_shared(64, &mine, &mem).ok());
  void* opened = nullptr;
  EXPECT_EQ(owner->open_shared(mem, &opened).code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(other->open_shared(mem, &opened).ok());
  std::unique_ptr<Event> event, remote;
  ASSERT_TRUE(owner->create_shared_event(&event, &ev).ok());
  ASSERT_TRUE(other->open_shared_event(ev, &remote).ok());
  const std::string mem_name = "/dev/shm" + SharedMapping::name_of(mem);
  const std::string ev_name = "/dev/shm" + SharedMapping::name_of(ev);
  EXPECT_EQ(access(mem_name.c_str(), F_OK), 0);
  owner->unpublish(mem);
  owner->unpublish(ev);
  EXPECT_NE(access(mem_name.c_str(), F_OK), 0);
  EXPECT_NE(access(ev_name.c_str(), F_OK), 0);

  std::unique_ptr<Stream> writer, reader;
  ASSERT_TRUE(owner->create_stream(&writer).ok());
  ASSERT_TRUE(other->create_stream(&reader).ok());
  // The writer's work is held until `open`; the reader's copy must wait for it.
  std::promise<void> open;
  std::shared_future<void> opened_gate = open.get_future().share();
  ASSERT_TRUE(owner->host_function(*writer, [opened_gate] { opened_gate.wait_for(10s); }).ok());
  const char text[] = "written by the owner";
  ASSERT_TRUE(owner->copy(mine, text, sizeof text, *writer).ok());
  ASSERT_TRUE(owner->record(*event, *writer).ok());
  EXPECT_EQ(other->record(*remote, *reader).code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(other->wait_event(*reader, *remote).ok());
  char got[sizeof text] = {};
  ASSERT_TRUE(other->copy(got, opened, sizeof text, *reader).ok());
  std::unique_ptr<Event> read;
  ASSERT_TRUE(other->create_event(&read).ok());
  ASSERT_TRUE(other->record(*read, *reader).ok());
  bool done = true;
  ASSERT_TRUE(other->query(*remote, &done).ok());
  EXPECT_FALSE(done);  // the owner's record has not completed
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(other->query(*read, &done).ok());
  EXPECT_FALSE(done);  // so the reader still waits
  open.set_value();
  ASSERT_TRUE(other->synchronize(*read, deadline_after(10)).ok());
  EXPECT_STREQ(got, text);
  ASSERT_TRUE(other->synchronize(*remote, deadline_after(10)).ok());
  other->close_shared(opened);
  owner->release(mine);
}

// A shared event whose owner's stream failed fails the other device's waits with that
// error, and one never completed fails them at the stand-in's timeout.
TEST(HostDevice, ASharedEventCarriesItsStreamsFailure) {
  auto owner = make_host_device({.index = 0, .timeout_seconds = 0.2});
  auto other = make_host_device({.index = 1, .timeout_seconds = 0.2});
  std::unique_ptr<Event> event, remote, failed_wait;
  IpcHandle ev;
  ASSERT_TRUE(owner->create_shared_event(&event, &ev).ok());
  ASSERT_TRUE(other->open_shared_event(ev, &remote).ok());
  std::unique_ptr<Stream> held, broken, reader;
  ASSERT_TRUE(owner->create_stream(&held).ok());
  ASSERT_TRUE(owner->create_stream(&broken).ok());
  ASSERT_TRUE(other->create_stream(&reader).ok());
  // `broken` fails: it waits for an event of `held`, which is held past the timeout.
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  std::unique_ptr<Event> never;
  ASSERT_TRUE(owner->create_event(&never).ok());
  ASSERT_TRUE(owner->host_function(*held, [gate] { gate.wait_for(10s); }).ok());
  ASSERT_TRUE(owner->record(*never, *held).ok());
  ASSERT_TRUE(owner->wait_event(*broken, *never).ok());
  ASSERT_TRUE(owner->record(*event, *broken).ok());
  const Status s = other->synchronize(*remote, deadline_after(10));
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("wait for an event"), std::string::npos) << s.message();
  open.set_value();
}

}  // namespace
}  // namespace kolo::device::host
