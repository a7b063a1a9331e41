// The option registry against what is written elsewhere: docs/configuration.md's table
// (every option) and the option tables of the other docs/*.md pages (names and defaults must be the
// registry's), and the TransportContext a transport is handed (startup/launch_env.h).
//
// Not for: the parse itself (config_test.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "startup/config.h"
#include "startup/launch_env.h"

#ifndef KOLO_SOURCE_DIR
#error "KOLO_SOURCE_DIR must name the source tree (src/core/CMakeLists.txt sets it)"
#endif

namespace kolo::core {
namespace {

std::string read(const std::filesystem::path& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(' ') - b + 1);
}

std::string without_backticks(std::string s) {
  std::erase(s, '`');
  return s;
}

struct Row {
  int line;
  std::string name;   // first cell, backticks removed
  std::string value;  // second cell, backticks removed
};

// Rows of markdown tables whose first cell is a `KOLO_...` variable.
std::vector<Row> variable_rows(const std::string& text) {
  std::vector<Row> rows;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind("| `KOLO_", 0) != 0) continue;
    std::vector<std::string> cells;
    std::size_t at = 1;
    for (std::size_t bar; (bar = line.find('|', at)) != std::string::npos; at = bar + 1) {
      cells.push_back(trim(line.substr(at, bar - at)));
    }
    if (cells.size() < 2) continue;
    rows.push_back({n, without_backticks(cells[0]), without_backticks(cells[1])});
  }
  return rows;
}

// How a table writes a default: the value, or "unset" for an option that is off unless set.
std::map<std::string, std::string> documented_defaults() {
  std::map<std::string, std::string> out;
  for (const auto& o : config_options()) {
    out[o.name] = *o.default_value ? o.default_value : "unset";
  }
  return out;
}

const std::filesystem::path kSource = KOLO_SOURCE_DIR;

TEST(OptionsDocTest, ConfigurationPageListsEveryOptionWithItsDefault) {
  const std::map<std::string, std::string> defaults = documented_defaults();
  std::set<std::string> listed;
  for (const Row& row : variable_rows(read(kSource / "docs" / "configuration.md"))) {
    const std::string where = "docs/configuration.md:" + std::to_string(row.line) + ": " + row.name;
    auto it = defaults.find(row.name);
    if (it == defaults.end()) {
      ADD_FAILURE() << where << " is not an option of startup/options.def";
      continue;
    }
    EXPECT_TRUE(listed.insert(row.name).second) << where << " is listed twice";
    EXPECT_EQ(row.value, it->second) << where << ": the default in startup/options.def differs";
  }
  for (const auto& [name, value] : defaults) {
    EXPECT_EQ(listed.count(name), 1u)
        << name << " (default " << value << ") is missing from docs/configuration.md's table";
  }
}

// Other docs/*.md pages may repeat some options in their own tables (docs/shm.md, ...): the
// defaults there must be the registry's too. Other variables (KOLO_RANK, KOLO_TEST_HOSTS) are not
// options and are not checked.
TEST(OptionsDocTest, DocsTablesGiveTheRegistryDefaults) {
  const std::map<std::string, std::string> defaults = documented_defaults();
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSource / "docs")) {
    if (entry.path().extension() != ".md") continue;
    for (const Row& row : variable_rows(read(entry.path()))) {
      auto it = defaults.find(row.name);
      if (it == defaults.end()) continue;
      ++checked;
      EXPECT_EQ(row.value, it->second)
          << entry.path().filename().string() << ":" << row.line << ": " << row.name
          << ": the default in startup/options.def differs";
    }
  }
  EXPECT_GT(checked, 0) << "no option table found under docs/";
}

// The context's own defaults (used by programs that build one by hand) are those of an
// empty environment.
TEST(TransportContextTest, DefaultsAreThoseOfAnEmptyEnvironment) {
  transport::TransportContext parsed;
  ASSERT_TRUE(transport_context(Env{}, &parsed).ok());
  const transport::TransportContext built;
  EXPECT_EQ(parsed.shm, built.shm);
  EXPECT_EQ(parsed.hierarchical, built.hierarchical);
  EXPECT_EQ(parsed.fusion_threshold_bytes, built.fusion_threshold_bytes);
  EXPECT_EQ(parsed.test_hosts, built.test_hosts);
  EXPECT_EQ(parsed.gloo_allreduce, built.gloo_allreduce);
}

// KOLO_GLOO_ALLREDUCE reaches the Gloo transport through the context (it once read the
// environment itself), and a value it does not know is an error naming it.
TEST(TransportContextTest, GlooAllreduceComesFromTheRegistry) {
  transport::TransportContext context;
  ASSERT_TRUE(transport_context(Env{{"KOLO_GLOO_ALLREDUCE", "gloo"}}, &context).ok());
  EXPECT_EQ(context.gloo_allreduce, "gloo");
  const Status bad = transport_context(Env{{"KOLO_GLOO_ALLREDUCE", "ring"}}, &context);
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("KOLO_GLOO_ALLREDUCE=ring"), std::string::npos) << bad.message();
}

TEST(TransportContextTest, CarriesTheParsedOptionsAndTheFakeHosts) {
  transport::TransportContext c;
  ASSERT_TRUE(transport_context({{"KOLO_SHM", "0"},
                                 {"KOLO_HIERARCHICAL", "1"},
                                 {"KOLO_FUSION_THRESHOLD", "1048576"},
                                 {"KOLO_TEST_HOSTS", "3"}},
                                &c)
                  .ok());
  EXPECT_EQ(c.shm, "0");
  EXPECT_EQ(c.hierarchical, "1");
  EXPECT_EQ(c.fusion_threshold_bytes, 1 << 20);
  EXPECT_EQ(c.test_hosts, 3);

  // From a Config and a launch environment, as kolo::init() builds it: the Config, not
  // the process environment, decides.
  Config config;
  config.shm = "1";
  config.fusion_threshold_bytes = 0;
  LaunchEnv launch;
  launch.test_hosts = 2;
  const transport::TransportContext d = transport_context(config, launch);
  EXPECT_EQ(d.shm, "1");
  EXPECT_EQ(d.hierarchical, "auto");
  EXPECT_EQ(d.fusion_threshold_bytes, 0);
  EXPECT_EQ(d.test_hosts, 2);
}

TEST(TransportContextTest, BadOptionsFailAndABadHostCountIsIgnored) {
  transport::TransportContext c;
  const Status s = transport_context({{"KOLO_SHM", "yes"}}, &c);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("KOLO_SHM=yes"), std::string::npos) << s.message();
  for (const char* hosts : {"two", "-1", "2x", ""}) {
    ASSERT_TRUE(transport_context({{"KOLO_TEST_HOSTS", hosts}}, &c).ok()) << hosts;
    EXPECT_EQ(c.test_hosts, 0) << hosts;
  }
}

}  // namespace
}  // namespace kolo::core
