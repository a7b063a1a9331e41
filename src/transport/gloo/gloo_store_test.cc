// Tests of GlooStore (gloo_store.h), the adapter gloo's rendezvous goes through, over a
// MemoryStore: get blocks until the key exists, every wait ends at the deadline (or a
// wait's own timeout) with gloo's exception carrying kolo's message.
#include "transport/gloo/gloo_store.h"

#include <gloo/common/error.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "rendezvous/memory_store.h"

namespace kolo::transport::gloo_impl {
namespace {

using std::chrono::milliseconds;

TEST(GlooStore, GetBlocksUntilTheKeyIsSet) {
  auto memory = std::make_shared<rendezvous::MemoryStore>();
  GlooStore store(memory, Clock::now() + std::chrono::seconds(10));
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(100));
    store.set("rank_1", {'h', 'i'});
  });
  const auto start = Clock::now();
  const std::vector<char> value = store.get("rank_1");
  writer.join();
  EXPECT_EQ(value, (std::vector<char>{'h', 'i'}));
  EXPECT_GE(Clock::now() - start, milliseconds(90));
  EXPECT_TRUE(store.error().ok());
}

TEST(GlooStore, GetFailsAtTheDeadlineNamingTheKey) {
  auto memory = std::make_shared<rendezvous::MemoryStore>();
  GlooStore store(memory, Clock::now() + milliseconds(200));
  const auto start = Clock::now();
  try {
    store.get("rank_3");
    FAIL() << "get of a missing key returned";
  } catch (const ::gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("rank_3"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(store.error().code(), ErrorCode::kPeerFailure);
  EXPECT_NE(store.error().message().find("rank_3"), std::string::npos);
}

TEST(GlooStore, WaitHonoursTheShorterOfTimeoutAndDeadline) {
  auto memory = std::make_shared<rendezvous::MemoryStore>();
  GlooStore store(memory, Clock::now() + std::chrono::seconds(30));
  const auto start = Clock::now();
  EXPECT_THROW(store.wait({"a", "b"}, milliseconds(150)), ::gloo::IoException);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  store.set("a", {'1'});
  store.set("b", {'2'});
  store.wait({"a", "b"}, milliseconds(150));  // both there: returns at once
  store.wait({"a"});
}

TEST(GlooStore, PassedDeadlineStillLooksOnce) {
  auto memory = std::make_shared<rendezvous::MemoryStore>();
  ASSERT_TRUE(memory->set("k", "v").ok());
  GlooStore store(memory, Clock::now() - milliseconds(1));
  EXPECT_EQ(store.get("k"), (std::vector<char>{'v'}));
}

// A watched wait ends as soon as the watch names a failure (a rank killed during an
// elastic reset once left its peers in gloo's rendezvous until the 630 s deadline, the
// launcher's notice of it already in the store); without one it runs to its deadline,
// whose message still names the missing key and the whole wait.
TEST(GlooStore, AWatchedWaitEndsAtTheLaunchersNotice) {
  auto memory = std::make_shared<rendezvous::MemoryStore>();
  GlooStore store(memory, Clock::now() + std::chrono::seconds(60), [&] {
    std::string v;
    bool found = false;
    memory->try_get("launcher/exit/1", &v, &found).ok();
    return found ? "the launcher reports: " + v : std::string();
  });
  std::thread launcher([&] {
    std::this_thread::sleep_for(milliseconds(300));
    ASSERT_TRUE(memory->set("launcher/exit/1", "rank 1 (host h) was killed by signal 9").ok());
  });
  const auto start = Clock::now();
  EXPECT_THROW(store.get("rank_1"), ::gloo::IoException);
  launcher.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(store.error().code(), ErrorCode::kPeerFailure);
  EXPECT_EQ(store.error().message(),
            "the launcher reports: rank 1 (host h) was killed by signal 9");

  GlooStore quiet(memory, Clock::now() + milliseconds(700), [] { return std::string(); });
  ASSERT_TRUE(memory->set("a", "1").ok());
  EXPECT_THROW(quiet.wait({"a", "b"}), ::gloo::IoException);
  EXPECT_NE(quiet.error().message().find("key 'b' (1 of the 2 keys waited for) was not set "
                                         "within 0.7"),
            std::string::npos)
      << quiet.error().message();
}

}  // namespace
}  // namespace kolo::transport::gloo_impl
