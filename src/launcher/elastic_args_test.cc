// elastic_options_from_args (launcher/elastic_args.h): kolorun's elastic flags into the
// driver's options and first hosts, and the message of each combination it refuses.
#include "launcher/elastic_args.h"

#include <gtest/gtest.h>

#include <limits>

namespace kolo::launcher {
namespace {

ElasticArgs args(int np, int min_np, int max_np) {
  ElasticArgs a;
  a.np = np;
  a.min_np = min_np;
  a.max_np = max_np;
  a.program = {"./train"};
  return a;
}

std::string refusal(const ElasticArgs& a) {
  ElasticOptions e;
  LaunchRequest r;
  const Status s = elastic_options_from_args(a, &e, &r);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  return s.message();
}

TEST(ElasticArgs, DefaultsFollowHorovod) {
  ElasticOptions e;
  LaunchRequest r;
  ASSERT_TRUE(elastic_options_from_args(args(3, 0, 0), &e, &r).ok());
  EXPECT_EQ(e.min_np, 3);  // --min-np defaults to -np
  EXPECT_EQ(e.max_np, 0);  // no --max-np: as many as there are slots
  EXPECT_EQ(e.start_np, 3);
  ASSERT_EQ(r.hosts.size(), 1u);  // this host, -np slots
  EXPECT_EQ(r.hosts[0].host, "localhost");
  EXPECT_EQ(r.hosts[0].slots, 3);
  EXPECT_EQ(r.program, std::vector<std::string>{"./train"});

  ASSERT_TRUE(elastic_options_from_args(args(0, 1, 4), &e, &r).ok());
  EXPECT_EQ(r.np, 1);              // -np defaults to --min-np
  EXPECT_EQ(r.hosts[0].slots, 4);  // room for --max-np

  ElasticArgs a = args(2, 1, 3);
  a.hosts_given = true;
  a.host_list = "a:2,b:1";
  a.cooldown = {1, 8};
  a.reset_limit = 2;
  ASSERT_TRUE(elastic_options_from_args(a, &e, &r).ok());
  EXPECT_EQ(e.hosts.size(), 2u);
  ASSERT_TRUE(e.cooldown.has_value());
  EXPECT_EQ(e.cooldown->hi, 8);
  EXPECT_EQ(e.reset_limit, 2);
}

TEST(ElasticArgs, RefusalsSayWhatIsWrong) {
  EXPECT_NE(refusal(args(0, 0, 0)).find("needs -np N or --min-np MIN"), std::string::npos);
  EXPECT_NE(refusal(args(2, 3, 2)).find("--min-np 3 is above --max-np 2"), std::string::npos);
  EXPECT_NE(refusal(args(5, 1, 4)).find("-np 5 is outside --min-np 1 .. --max-np 4"),
            std::string::npos);
  ElasticArgs a = args(2, 1, 2);
  a.slots = 0;
  EXPECT_NE(refusal(a).find("--slots 0 must be at least 1"), std::string::npos);
  a = args(2, 1, 2);
  a.cooldown = {4, 2};
  EXPECT_NE(refusal(a).find("expected 0 < LO <= HI"), std::string::npos);
  a = args(2, 1, 2);
  a.elastic_timeout = 0;
  EXPECT_NE(refusal(a).find("--elastic-timeout 0 is outside [0.001, 604800] seconds"),
            std::string::npos)
      << refusal(a);
  a = args(2, 1, 2);
  a.discovery_script = "echo localhost:2";
  a.hosts_given = true;
  a.host_list = "a:2";
  EXPECT_NE(refusal(a).find("--host-discovery-script and -H both name the hosts"),
            std::string::npos);
  a = args(2, 2, 0);
  a.hosts_given = true;
  a.host_list = "a:1";
  EXPECT_NE(refusal(a).find("--min-np 2 is more than the 1 slots of a:1"), std::string::npos);
  a = args(2, 1, 2);
  a.program.clear();
  EXPECT_NE(refusal(a).find("no program given"), std::string::npos);
}

TEST(ElasticArgs, TheDiscoveryScriptsFirstRunMustWork) {
  ElasticOptions e;
  LaunchRequest r;
  ElasticArgs a = args(2, 1, 3);
  a.discovery_script = "printf 'localhost:2\\n127.0.0.1\\n'";
  ASSERT_TRUE(elastic_options_from_args(a, &e, &r).ok());
  ASSERT_EQ(e.hosts.size(), 2u);
  EXPECT_EQ(e.hosts[1].slots, 1);  // --slots for a host without ":slots"
  EXPECT_EQ(e.discovery_script, a.discovery_script);
  a.discovery_script = "exit 3";
  EXPECT_NE(refusal(a).find("(on its first run)"), std::string::npos);
}

// kolorun hands --elastic-timeout to its workers as KOLO_ELASTIC_TIMEOUT_SECONDS: a value
// they would refuse at init is refused before any starts, and so is a bad variable.
TEST(ElasticArgs, TheTimeoutHasTheWorkersRange) {
  for (double bad : {700000.0, std::numeric_limits<double>::infinity(), 0.0001, -1.0}) {
    ElasticArgs a = args(2, 1, 2);
    a.elastic_timeout = bad;
    EXPECT_NE(refusal(a).find("--elastic-timeout"), std::string::npos) << bad;
    EXPECT_NE(refusal(a).find("is outside [0.001, 604800] seconds"), std::string::npos)
        << refusal(a);
  }
  ElasticArgs a = args(2, 1, 2);
  a.discovery_interval = std::numeric_limits<double>::infinity();
  EXPECT_NE(refusal(a).find("--discovery-interval inf is outside"), std::string::npos)
      << refusal(a);
  a = args(2, 1, 2);
  a.elastic_timeout_env = "700000";
  EXPECT_NE(refusal(a).find("KOLO_ELASTIC_TIMEOUT_SECONDS (--elastic-timeout's default) "
                            "700000 is outside"),
            std::string::npos)
      << refusal(a);
  a.elastic_timeout_env = "ten";
  EXPECT_NE(refusal(a).find("KOLO_ELASTIC_TIMEOUT_SECONDS=ten is not a number of seconds"),
            std::string::npos)
      << refusal(a);
  a.elastic_timeout_env = "30";
  ElasticOptions e;
  LaunchRequest request;
  ASSERT_TRUE(elastic_options_from_args(a, &e, &request).ok());
  EXPECT_EQ(e.elastic_timeout_s, 30);
  a.elastic_timeout_env.clear();
  a.elastic_timeout = 604800;
  ASSERT_TRUE(elastic_options_from_args(a, &e, &request).ok());
  EXPECT_EQ(e.elastic_timeout_s, 604800);
}

}  // namespace
}  // namespace kolo::launcher
