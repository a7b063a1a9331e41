// parse_config and the option tables of startup/config.h.
#include "startup/config.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace kolo::core {
namespace {

Config parse_ok(const Env& env) {
  Config c;
  c.cache_capacity = -12345;  // must be overwritten
  const Status s = parse_config(env, &c);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return c;
}

TEST(ConfigTest, Defaults) {
  const Config c = parse_ok({});
  EXPECT_EQ(c.cache_capacity, 1024);
  EXPECT_EQ(c.cycle_time_ms, 0.0);
  EXPECT_EQ(c.stall_check_seconds, 60.0);
  // A stall ends the job after 10 minutes instead of waiting forever (0 = forever).
  EXPECT_EQ(c.stall_shutdown_seconds, 600.0);
  EXPECT_EQ(c.peer_timeout_seconds, 60.0);
  EXPECT_EQ(c.log_level, log::kWarning);
  EXPECT_EQ(c.transport, "auto");
  EXPECT_EQ(c.fusion_threshold_bytes, 64 << 20);
  EXPECT_EQ(c.shm, "auto");
  // Start-up (docs/startup.md): five minutes for every task to arrive, as torch's store.
  EXPECT_EQ(c.start_timeout_seconds, 300.0);
  EXPECT_EQ(c.rendezvous_addr, "");
  EXPECT_EQ(c.rendezvous_secret, "");
  EXPECT_EQ(c.host_addr, "");
  EXPECT_EQ(c.gloo_iface, "");
}

TEST(ConfigTest, StartUpOptions) {
  const Config c = parse_ok({{"KOLO_RENDEZVOUS_ADDR", "10.0.0.1:29500"},
                             {"KOLO_RENDEZVOUS_SECRET", "a b\x01"},
                             {"KOLO_START_TIMEOUT_SECONDS", "2.5"},
                             {"KOLO_HOST_ADDR", "10.0.0.2"},
                             {"KOLO_GLOO_IFACE", "eth1"}});
  EXPECT_EQ(c.rendezvous_addr, "10.0.0.1:29500");
  EXPECT_EQ(c.rendezvous_secret, "a b\x01");
  EXPECT_EQ(c.start_timeout_seconds, 2.5);
  EXPECT_EQ(c.host_addr, "10.0.0.2");
  EXPECT_EQ(c.gloo_iface, "eth1");
  Config d;
  EXPECT_EQ(parse_config({{"KOLO_START_TIMEOUT_SECONDS", "0"}}, &d).message(),
            "KOLO_START_TIMEOUT_SECONDS=0 is not valid: expected a number in [0.001, 604800]");
}

TEST(ConfigTest, EmptyAndUnrelatedVariablesKeepDefaults) {
  const Config c = parse_ok({{"KOLO_CACHE_CAPACITY", ""},
                             {"KOLO_CYCLE_TIME_MS", ""},
                             {"KOLO_LOG_LEVEL", ""},
                             {"KOLO_TRANSPORT", ""},
                             {"HOROVOD_CYCLE_TIME", "7"},
                             {"PATH", "/usr/bin"}});
  EXPECT_EQ(c.cache_capacity, 1024);
  EXPECT_EQ(c.cycle_time_ms, 0.0);
  EXPECT_EQ(c.log_level, log::kWarning);
  EXPECT_EQ(c.transport, "auto");
}

TEST(ConfigTest, EachVariableParsed) {
  const Config c = parse_ok({{"KOLO_CACHE_CAPACITY", "0"},
                             {"KOLO_CYCLE_TIME_MS", "2.5"},
                             {"KOLO_STALL_CHECK_SECONDS", "0"},
                             {"KOLO_STALL_SHUTDOWN_SECONDS", "120"},
                             {"KOLO_PEER_TIMEOUT_SECONDS", "0.25"},
                             {"KOLO_LOG_LEVEL", "debug"},
                             {"KOLO_TRANSPORT", "mpi"}});
  EXPECT_EQ(c.cache_capacity, 0);
  EXPECT_EQ(c.cycle_time_ms, 2.5);
  EXPECT_EQ(c.stall_check_seconds, 0.0);
  EXPECT_EQ(c.stall_shutdown_seconds, 120.0);
  EXPECT_EQ(c.peer_timeout_seconds, 0.25);
  EXPECT_EQ(c.log_level, log::kDebug);
  EXPECT_EQ(c.transport, "mpi");

  EXPECT_EQ(parse_ok({{"KOLO_CACHE_CAPACITY", "4096"}}).cache_capacity, 4096);
  EXPECT_EQ(parse_ok({{"KOLO_CACHE_CAPACITY", "1048576"}}).cache_capacity, 1 << 20);
  EXPECT_EQ(parse_ok({{"KOLO_CYCLE_TIME_MS", "0"}}).cycle_time_ms, 0.0);
  EXPECT_EQ(parse_ok({{"KOLO_STALL_CHECK_SECONDS", "1e1"}}).stall_check_seconds, 10.0);
  EXPECT_EQ(parse_ok({{"KOLO_TRANSPORT", "local"}}).transport, "local");
  EXPECT_EQ(parse_ok({{"KOLO_TRANSPORT", "auto"}}).transport, "auto");
  EXPECT_EQ(parse_ok({{"KOLO_FUSION_THRESHOLD", "0"}}).fusion_threshold_bytes, 0);
  EXPECT_EQ(parse_ok({{"KOLO_FUSION_THRESHOLD", "1048576"}}).fusion_threshold_bytes, 1 << 20);
  EXPECT_EQ(parse_ok({{"KOLO_FUSION_THRESHOLD", "8589934592"}}).fusion_threshold_bytes,
            std::int64_t{8} << 30);
  EXPECT_TRUE(parse_ok({{"KOLO_AUTOTUNE", "1"}}).autotune);
  EXPECT_EQ(parse_ok({{"KOLO_AUTOTUNE_LOG", "/tmp/a.csv"}}).autotune_log, "/tmp/a.csv");
  EXPECT_EQ(parse_ok({{"KOLO_AUTOTUNE_CYCLES_PER_SAMPLE", "5"}}).autotune_cycles_per_sample, 5);
  EXPECT_EQ(parse_ok({{"KOLO_TIMELINE", "/tmp/t.json"}}).timeline_path, "/tmp/t.json");
  EXPECT_TRUE(parse_ok({{"KOLO_TIMELINE_MARK_CYCLES", "1"}}).timeline_mark_cycles);
  EXPECT_TRUE(parse_ok({}).cycle_on_demand);
  EXPECT_FALSE(parse_ok({{"KOLO_CYCLE_ON_DEMAND", "0"}}).cycle_on_demand);
  EXPECT_EQ(parse_ok({{"KOLO_SHM", "0"}}).shm, "0");
  EXPECT_EQ(parse_ok({{"KOLO_HIERARCHICAL", "1"}}).hierarchical, "1");
  EXPECT_EQ(parse_ok({{"KOLO_SHM", "1"}}).shm, "1");
  const std::pair<const char*, log::Level> levels[] = {
      {"trace", log::kTrace},  {"info", log::kInfo},   {"warning", log::kWarning},
      {"warn", log::kWarning}, {"error", log::kError}, {"off", log::kOff},
      {"0", log::kTrace},      {"4", log::kError}};
  for (const auto& [text, level] : levels) {
    EXPECT_EQ(parse_ok({{"KOLO_LOG_LEVEL", text}}).log_level, level) << text;
  }
}

TEST(ConfigTest, BadValuesNameVariableAndValue) {
  const std::pair<const char*, const char*> bad[] = {
      {"KOLO_CACHE_CAPACITY", "-1"},
      {"KOLO_CACHE_CAPACITY", "lots"},
      {"KOLO_CACHE_CAPACITY", "12x"},
      {"KOLO_CACHE_CAPACITY", "1.5"},
      {"KOLO_CACHE_CAPACITY", "1048577"},
      {"KOLO_CACHE_CAPACITY", "99999999999999999999"},
      {"KOLO_CYCLE_TIME_MS", "-1"},
      {"KOLO_CYCLE_TIME_MS", "fast"},
      {"KOLO_CYCLE_TIME_MS", "nan"},
      {"KOLO_CYCLE_TIME_MS", "5ms"},
      {"KOLO_STALL_CHECK_SECONDS", "-0.5"},
      {"KOLO_STALL_SHUTDOWN_SECONDS", "never"},
      {"KOLO_STALL_SHUTDOWN_SECONDS", "-3"},
      {"KOLO_PEER_TIMEOUT_SECONDS", "0"},
      {"KOLO_PEER_TIMEOUT_SECONDS", "-60"},
      // Durations past their documented range (seconds to nanoseconds overflowed, and
      // start-up then failed "within -2147483648 s"; inf cycle times acted as 0).
      {"KOLO_PEER_TIMEOUT_SECONDS", "1e10"},
      {"KOLO_PEER_TIMEOUT_SECONDS", "inf"},
      {"KOLO_PEER_TIMEOUT_SECONDS", "9223372036854775807"},
      {"KOLO_PEER_TIMEOUT_SECONDS", "604801"},
      {"KOLO_CYCLE_TIME_MS", "inf"},
      {"KOLO_CYCLE_TIME_MS", "1e13"},
      {"KOLO_CYCLE_TIME_MS", "60001"},
      {"KOLO_STALL_CHECK_SECONDS", "inf"},
      {"KOLO_STALL_CHECK_SECONDS", "1e300"},
      {"KOLO_STALL_SHUTDOWN_SECONDS", "inf"},
      {"KOLO_STALL_SHUTDOWN_SECONDS", "-inf"},
      {"KOLO_LOG_LEVEL", "loud"},
      {"KOLO_LOG_LEVEL", "6"},
      {"KOLO_LOG_LEVEL", "WARNING "},
      {"KOLO_TRANSPORT", "nccl"},
      {"KOLO_TRANSPORT", "MPI"},
      {"KOLO_FUSION_THRESHOLD", "-1"},
      {"KOLO_FUSION_THRESHOLD", "64M"},
      {"KOLO_FUSION_THRESHOLD", "2e6"},
      {"KOLO_SHM", "yes"},
      {"KOLO_HIERARCHICAL", "on"},
      {"KOLO_AUTOTUNE", "yes"},
      {"KOLO_AUTOTUNE_WARMUP_SAMPLES", "0"},
      {"KOLO_AUTOTUNE_CYCLES_PER_SAMPLE", "many"},
      {"KOLO_TIMELINE_MARK_CYCLES", "2"},
      {"KOLO_CYCLE_ON_DEMAND", "true"},
  };
  for (const auto& [name, value] : bad) {
    Config c;
    const Status s = parse_config({{name, value}}, &c);
    ASSERT_FALSE(s.ok()) << name << "=" << value << " was accepted";
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(value), std::string::npos) << s.message();
  }
}

// The largest documented durations are accepted and stay far from overflowing the
// nanosecond deadlines built from them.
TEST(ConfigTest, DurationsAtTheirUpperBoundsAreAccepted) {
  const Config c = parse_ok({{"KOLO_PEER_TIMEOUT_SECONDS", "604800"},
                             {"KOLO_STALL_CHECK_SECONDS", "604800"},
                             {"KOLO_STALL_SHUTDOWN_SECONDS", "0"},
                             {"KOLO_CYCLE_TIME_MS", "60000"}});
  EXPECT_EQ(c.peer_timeout_seconds, 604800.0);
  EXPECT_EQ(c.stall_shutdown_seconds, 0.0);
  EXPECT_EQ(c.cycle_time_ms, 60000.0);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(c.peer_timeout_seconds));
  EXPECT_GT(ns.count(), 0);
}

TEST(ConfigTest, OneBadVariableFailsTheWholeParse) {
  Config c;
  EXPECT_FALSE(parse_config({{"KOLO_CACHE_CAPACITY", "8"}, {"KOLO_TRANSPORT", "tcp"}}, &c).ok());
}

const OptionDoc* find_option(const std::vector<OptionDoc>& options, const std::string& name) {
  for (const auto& o : options) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

TEST(ConfigTest, OptionsTableDocumentsDefaults) {
  const std::pair<const char*, const char*> expected[] = {
      {"KOLO_CACHE_CAPACITY", "1024"},
      {"KOLO_CYCLE_TIME_MS", "0"},
      {"KOLO_STALL_CHECK_SECONDS", "60"},
      {"KOLO_STALL_SHUTDOWN_SECONDS", "600"},
      {"KOLO_PEER_TIMEOUT_SECONDS", "60"},
      {"KOLO_FUSION_THRESHOLD", "67108864"},
      {"KOLO_AUTOTUNE", "0"},
      {"KOLO_TIMELINE", ""},
      {"KOLO_SHM", "auto"},
      {"KOLO_CYCLE_ON_DEMAND", "1"},
  };
  for (const auto& [name, value] : expected) {
    const OptionDoc* o = find_option(config_options(), name);
    ASSERT_NE(o, nullptr) << name;
    EXPECT_STREQ(o->default_value, value) << name;
    EXPECT_GT(std::string(o->doc).size(), 10u) << name;
  }
}

// The documented defaults, fed back through the parser, give the built-in defaults: for
// every member, as options.def lists them.
TEST(ConfigTest, DocumentedDefaultsParseToBuiltInDefaults) {
  Env env;
  for (const auto& o : config_options()) env[o.name] = o.default_value;
  const Config documented = parse_ok(env);
  const Config builtin = parse_ok({});
#define KOLO_OPTION(type, member, name, default_value, accepts, doc) \
  EXPECT_EQ(documented.member, builtin.member) << name;
#include "startup/options.def"
#undef KOLO_OPTION
}

// Each option alone, set to its documented default, parses (a default the option's own
// kind refused would fail here).
TEST(ConfigTest, EveryOptionParsesItsDefault) {
  for (const auto& o : config_options()) {
    Config c;
    const Status s = parse_config({{o.name, o.default_value}}, &c);
    EXPECT_TRUE(s.ok()) << o.name << "=" << o.default_value << ": " << s.to_string();
  }
}

// The help rows are the declarations of options.def, in their order, each with its doc.
TEST(ConfigTest, HelpRowsComeFromTheDeclarations) {
  const std::vector<std::string> declared = {
#define KOLO_OPTION(type, member, name, default_value, accepts, doc) name,
#include "startup/options.def"
#undef KOLO_OPTION
  };
  std::vector<std::string> listed;
  for (const auto& o : config_options()) {
    listed.push_back(o.name);
    EXPECT_GT(std::string(o.doc).size(), 10u) << o.name;
  }
  EXPECT_EQ(listed, declared);
  EXPECT_EQ(listed.size(), 27u);
}

// What each kind of option accepts, as the help says it and as its error message says it
// (the messages are those the hand-written parser gave).
TEST(ConfigTest, AcceptedValuesAndMessagesFollowTheKind) {
  const std::pair<const char*, const char*> accepts[] = {
      {"KOLO_CACHE_CAPACITY", "an integer in [0, 1048576]"},
      {"KOLO_FUSION_THRESHOLD", "an integer in [0, 1099511627776]"},
      {"KOLO_AUTOTUNE_WARMUP_SAMPLES", "an integer in [1, 1000]"},
      {"KOLO_CYCLE_TIME_MS", "a number in [0, 60000]"},
      {"KOLO_PEER_TIMEOUT_SECONDS", "a number in [0.001, 604800]"},
      {"KOLO_STALL_SHUTDOWN_SECONDS", "a number in [0, 604800]"},
      {"KOLO_CYCLE_ON_DEMAND", "0 or 1"},
      {"KOLO_AUTOTUNE", "0 or 1"},
      {"KOLO_TRANSPORT", "auto, gloo, mpi or local"},
      {"KOLO_SHM", "auto, 0 or 1"},
      {"KOLO_HIERARCHICAL", "auto, 0 or 1"},
      {"KOLO_LOG_LEVEL", "trace, debug, info, warning, error or off"},
      {"KOLO_TIMELINE", ""},
      {"KOLO_AUTOTUNE_LOG", ""},
  };
  for (const auto& [name, want] : accepts) {
    const OptionDoc* o = find_option(config_options(), name);
    ASSERT_NE(o, nullptr) << name;
    EXPECT_STREQ(o->accepts, want) << name;
  }
  const std::pair<Env, const char*> messages[] = {
      {{{"KOLO_CACHE_CAPACITY", "-1"}},
       "KOLO_CACHE_CAPACITY=-1 is not valid: expected an integer in [0, 1048576]"},
      {{{"KOLO_PEER_TIMEOUT_SECONDS", "0"}},
       "KOLO_PEER_TIMEOUT_SECONDS=0 is not valid: expected a number in [0.001, 604800]"},
      {{{"KOLO_TRANSPORT", "tcp"}},
       "KOLO_TRANSPORT=tcp is not valid: expected auto, gloo, mpi or local"},
      {{{"KOLO_LOG_LEVEL", "loud"}},
       "KOLO_LOG_LEVEL=loud is not valid: expected trace, debug, info, warning, error or off"},
      {{{"KOLO_AUTOTUNE", "yes"}}, "KOLO_AUTOTUNE=yes is not valid: expected 0 or 1"},
      {{{"KOLO_SHM", "on"}}, "KOLO_SHM=on is not valid: expected auto, 0 or 1"},
  };
  for (const auto& [env, want] : messages) {
    Config c;
    const Status s = parse_config(env, &c);
    EXPECT_EQ(s.message(), want);
  }
}

// Every option that is not free text refuses a word, naming itself, the value and what
// it accepts; free text takes anything.
TEST(ConfigTest, EveryOptionRefusesAValueOutsideItsKind) {
  for (const auto& o : config_options()) {
    Config c;
    const Status s = parse_config({{o.name, "bogus value"}}, &c);
    if (*o.accepts == '\0') {
      EXPECT_TRUE(s.ok()) << o.name << ": " << s.to_string();
      continue;
    }
    ASSERT_FALSE(s.ok()) << o.name << " accepted 'bogus value'";
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << o.name;
    EXPECT_EQ(s.message(),
              std::string(o.name) + "=bogus value is not valid: expected " + o.accepts);
  }
}

TEST(ConfigTest, LauncherVariablesListed) {
  for (const char* name : {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE",
                           "KOLO_CROSS_RANK", "KOLO_CROSS_SIZE"}) {
    EXPECT_NE(find_option(launcher_variables(), name), nullptr) << name;
  }
}

TEST(ConfigTest, ProcessEnvSplitsAtFirstEquals) {
  ASSERT_EQ(setenv("KOLO_CONFIG_TEST_VAR", "a=b=c", 1), 0);
  const Env env = process_env();
  unsetenv("KOLO_CONFIG_TEST_VAR");
  auto it = env.find("KOLO_CONFIG_TEST_VAR");
  ASSERT_NE(it, env.end());
  EXPECT_EQ(it->second, "a=b=c");
  EXPECT_EQ(process_env().count("KOLO_CONFIG_TEST_VAR"), 0u);
}

// The job secret's help row shows no value, and says kolo never prints it.
TEST(ConfigTest, SecretHelpRowShowsNoValue) {
  const OptionDoc* secret = find_option(config_options(), "KOLO_RENDEZVOUS_SECRET");
  ASSERT_NE(secret, nullptr);
  EXPECT_STREQ(secret->default_value, "");
  EXPECT_NE(std::string(secret->doc).find("never prints"), std::string::npos) << secret->doc;
}

}  // namespace
}  // namespace kolo::core
