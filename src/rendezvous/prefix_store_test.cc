// What only the prefix view does: how it maps keys into the store below. (The Store
// contract over a prefix view runs in store_test.cc.)
#include "rendezvous/prefix_store.h"

#include <gtest/gtest.h>

#include "rendezvous/memory_store.h"

namespace kolo::rendezvous {
namespace {

TEST(PrefixStore, KeysLiveUnderThePrefixInTheStoreBelow) {
  const auto base = std::make_shared<MemoryStore>();
  PrefixStore view(base, "gen/3");
  ASSERT_TRUE(view.set("rank/1", "addr").ok());
  std::string value;
  bool found = false;
  ASSERT_TRUE(base->try_get("gen/3/rank/1", &value, &found).ok());
  EXPECT_TRUE(found);
  EXPECT_EQ(value, "addr");
  // And what is written below under the prefix is seen through the view.
  ASSERT_TRUE(base->set("gen/3/rank/2", "other").ok());
  ASSERT_TRUE(view.get("rank/2", deadline_after(1), &value).ok());
  EXPECT_EQ(value, "other");
}

TEST(PrefixStore, ViewsNest) {
  const auto base = std::make_shared<MemoryStore>();
  const auto gen = std::make_shared<PrefixStore>(base, "gen/3");
  PrefixStore gloo(gen, "gloo");
  std::int64_t n = 0;
  ASSERT_TRUE(gloo.add("count", 4, &n).ok());
  std::string value;
  ASSERT_TRUE(base->get("gen/3/gloo/count", deadline_after(1), &value).ok());
  EXPECT_EQ(value, "4");
  EXPECT_EQ(gloo.describe(), "prefix 'gloo' of prefix 'gen/3' of memory store");
}

TEST(PrefixStore, MessagesNameTheFullKey) {
  PrefixStore view(std::make_shared<MemoryStore>(), "gen/3");
  std::string value;
  const Status s = view.get("rank/1", deadline_after(0.01), &value);
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("key 'gen/3/rank/1' was not set"), std::string::npos) << s.message();
}

TEST(PrefixStore, AnEmptyPrefixIsRefused) {
  PrefixStore view(std::make_shared<MemoryStore>(), "");
  const Status s = view.set("k", "v");
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has an empty prefix"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kolo::rendezvous
