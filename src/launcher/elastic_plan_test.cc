// Tests of the elastic driver's pure decisions (elastic_plan.h).
#include "launcher/elastic_plan.h"

#include <gtest/gtest.h>

namespace kolo::launcher {
namespace {

using std::chrono::seconds;

TEST(DiscoveryOutput, ParsesHostsWithAndWithoutSlots) {
  std::vector<HostSlots> hosts;
  ASSERT_TRUE(parse_discovery_output("a:2\n\n  b \nc:1\r\na:1\n", 4, &hosts).ok());
  EXPECT_EQ(hosts, (std::vector<HostSlots>{{"a", 3}, {"b", 4}, {"c", 1}}));
  ASSERT_TRUE(parse_discovery_output("", 1, &hosts).ok());
  EXPECT_TRUE(hosts.empty());
}

TEST(DiscoveryOutput, NamesTheBadLine) {
  std::vector<HostSlots> hosts = {{"kept", 1}};
  for (const auto& [text, line] : std::vector<std::pair<std::string, std::string>>{
           {"a:2\nb:x\n", "line 2, 'b:x'"},
           {"a:2\n\nb:0\n", "line 3, 'b:0'"},
           {"a b\n", "line 1, 'a b'"},
           {"a:1,b:1\n", "line 1, 'a:1,b:1'"},
           {"Traceback (most recent call last):\n", "line 1, 'Traceback"},
           {"-oProxyCommand=x\n", "line 1, '-oProxyCommand=x'"}}) {
    Status s = parse_discovery_output(text, 1, &hosts);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find(line), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("expected HOST or HOST:SLOTS"), std::string::npos) << s.message();
  }
  EXPECT_EQ(hosts, (std::vector<HostSlots>{{"kept", 1}})) << "unchanged on error";
}

TEST(Cooldown, DoublesWithEachBlacklistingWithinTheRange) {
  const Cooldown range{1, 100};
  EXPECT_DOUBLE_EQ(cooldown_seconds(range, 1, 0), 2);
  EXPECT_DOUBLE_EQ(cooldown_seconds(range, 1, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(cooldown_seconds(range, 2, 0.25), 4.25);
  EXPECT_DOUBLE_EQ(cooldown_seconds(range, 3, 0), 8);
  EXPECT_DOUBLE_EQ(cooldown_seconds(range, 10, 0), 100);    // clamped to HI
  EXPECT_DOUBLE_EQ(cooldown_seconds(range, 1000, 0), 100);  // no overflow
  EXPECT_DOUBLE_EQ(cooldown_seconds({3, 3}, 1, 0.9), 3);
  EXPECT_DOUBLE_EQ(cooldown_seconds({5, 60}, 0, 0), 5);  // never below LO
}

TEST(Blacklist, WithoutCooldownAHostIsBlockedForGood) {
  Blacklist b(std::nullopt, [] { return 0.0; });
  const Deadline t0 = Clock::now();
  EXPECT_FALSE(b.blocked("a", t0));
  EXPECT_FALSE(b.add("a", t0).has_value());
  EXPECT_TRUE(b.blocked("a", t0 + seconds(1000000)));
  EXPECT_TRUE(b.blocked_for_good("a", t0));
  EXPECT_FALSE(b.blocked("b", t0));
  EXPECT_EQ(b.blocked_of({{"a", 1}, {"b", 2}}, t0), (std::set<std::string>{"a"}));
  EXPECT_FALSE(b.next_return(t0).has_value());
}

TEST(Blacklist, CooldownEndsAndGrowsWithEachFailure) {
  double u = 0.5;
  Blacklist b(Cooldown{1, 10}, [&] { return u; });
  const Deadline t0 = Clock::now();
  auto back = b.add("a", t0);  // 1 * 2 + 0.5 = 2.5 s
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, t0 + std::chrono::milliseconds(2500));
  EXPECT_TRUE(b.blocked("a", t0 + seconds(2)));
  EXPECT_FALSE(b.blocked_for_good("a", t0));
  EXPECT_EQ(b.next_return(t0), back);
  EXPECT_FALSE(b.blocked("a", t0 + seconds(3)));
  EXPECT_FALSE(b.next_return(t0 + seconds(3)).has_value());
  u = 0;
  back = b.add("a", t0 + seconds(3));  // second time: 1 * 4 + 0 = 4 s
  EXPECT_EQ(*back, t0 + seconds(7));
  EXPECT_TRUE(b.blocked("a", t0 + seconds(6)));
  back = b.add("a", t0 + seconds(7));  // 8 s
  EXPECT_EQ(*back, t0 + seconds(15));
  back = b.add("a", t0 + seconds(15));  // 16 s, clamped to 10
  EXPECT_EQ(*back, t0 + seconds(25));
}

std::vector<int> ids(const std::vector<PlanMember>& members) {
  std::vector<int> out;
  for (const auto& m : members) out.push_back(m.id);
  return out;
}

TEST(NextPlan, FirstPlanFillsHostsInOrderUpToMax) {
  PlanRequest r;
  r.hosts = {{"a", 2}, {"b", 2}};
  r.min_np = 1;
  r.max_np = 3;
  PlanResult p = next_plan(r);
  ASSERT_FALSE(p.wait);
  EXPECT_EQ(p.members, (std::vector<PlanMember>{
                           {0, "a", 0, 2, 0, 2}, {1, "a", 1, 2, 0, 1}, {2, "b", 0, 1, 1, 2}}));
  EXPECT_EQ(p.started, p.members);
  EXPECT_TRUE(p.removed.empty());
  r.max_np = 0;  // no cap: every slot
  EXPECT_EQ(next_plan(r).members.size(), 4u);
}

TEST(NextPlan, SurvivorsKeepTheirOrderFirstAndNewWorkersFillFreeSlots) {
  PlanRequest r;
  r.hosts = {{"a", 2}, {"b", 2}};
  // id 1 (on a) died; 2 and 0 survive in their previous rank order (2 had rank 0).
  r.living = {{2, "b"}, {0, "a"}};
  r.blocked = {"a"};  // where 1 failed: its survivor stays, nothing new starts there
  r.min_np = 2;
  r.max_np = 4;
  r.next_id = 5;
  PlanResult p = next_plan(r);
  ASSERT_FALSE(p.wait);
  EXPECT_EQ(ids(p.members), (std::vector<int>{2, 0, 5}));
  EXPECT_EQ(ids(p.started), (std::vector<int>{5}));
  EXPECT_EQ(p.started[0].host, "b");
  // b holds ranks 0 and 2: local ranks 0, 1; a's only member is local rank 0 of host 2.
  EXPECT_EQ(p.members[0], (PlanMember{2, "b", 0, 2, 0, 2}));
  EXPECT_EQ(p.members[1], (PlanMember{0, "a", 0, 1, 1, 2}));
  EXPECT_EQ(p.members[2], (PlanMember{5, "b", 1, 2, 0, 1}));
}

TEST(NextPlan, WorkersOfAVanishedHostOrBeyondTheCapAreRemoved) {
  PlanRequest r;
  r.living = {{0, "a"}, {1, "b"}, {2, "a"}, {3, "a"}};
  r.hosts = {{"a", 2}};  // b left; a has 2 slots now
  r.min_np = 1;
  r.next_id = 4;
  PlanResult p = next_plan(r);
  ASSERT_FALSE(p.wait);
  EXPECT_EQ(ids(p.members), (std::vector<int>{0, 2}));
  EXPECT_EQ(p.removed, (std::vector<int>{1, 3}));
  EXPECT_TRUE(p.started.empty());
  r.hosts = {{"a", 4}, {"b", 1}};
  r.max_np = 2;
  p = next_plan(r);
  EXPECT_EQ(ids(p.members), (std::vector<int>{0, 1}));
  EXPECT_EQ(p.removed, (std::vector<int>{2, 3}));
}

TEST(NextPlan, WaitsWhenFewerThanMinFit) {
  PlanRequest r;
  r.living = {{0, "a"}};
  r.hosts = {{"a", 2}, {"b", 1}};
  r.blocked = {"a", "b"};
  r.min_np = 2;
  r.next_id = 1;
  PlanResult p = next_plan(r);
  EXPECT_TRUE(p.wait);
  EXPECT_EQ(p.workers, 1);
  EXPECT_TRUE(p.members.empty());
  EXPECT_TRUE(p.removed.empty()) << "waiting removes nobody";
  r.blocked = {"a"};  // b's slot is usable again
  p = next_plan(r);
  ASSERT_FALSE(p.wait);
  EXPECT_EQ(ids(p.members), (std::vector<int>{0, 1}));
  EXPECT_EQ(p.members[1].host, "b");
  r.hosts.clear();  // nothing listed at all
  p = next_plan(r);
  EXPECT_TRUE(p.wait);
  EXPECT_EQ(p.workers, 0);
}

TEST(PlanText, RoundTripsAndNamesABadLine) {
  const std::vector<PlanMember> m = {
      {4, "a", 0, 2, 0, 2}, {0, "b", 0, 1, 1, 2}, {7, "a", 1, 2, 0, 1}};
  EXPECT_EQ(format_plan(m), "4 a 0 2 0 2\n0 b 0 1 1 2\n7 a 1 2 0 1\n");
  std::vector<PlanMember> back;
  ASSERT_TRUE(parse_plan(format_plan(m), &back).ok());
  EXPECT_EQ(back, m);
  Status s = parse_plan("4 a 0 2 0 2\n0 b 0 1\n", &back);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("line 2, '0 b 0 1'"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kolo::launcher
