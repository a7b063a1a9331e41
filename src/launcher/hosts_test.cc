// Tests for -H host lists and hostfile parsing.
#include "launcher/hosts.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace kolo::launcher {
namespace {

using Hosts = std::vector<HostSlots>;

TEST(HostList, ParsesHostsWithAndWithoutSlots) {
  Hosts hosts;
  ASSERT_TRUE(parse_host_list("a:2,b,c.example.com:4", &hosts).ok());
  EXPECT_EQ(hosts, (Hosts{{"a", 2}, {"b", 1}, {"c.example.com", 4}}));
  EXPECT_EQ(total_slots(hosts), 7);
  EXPECT_EQ(format_host_list(hosts), "a:2,b:1,c.example.com:4");
}

TEST(HostList, MergesRepeatedHostsInFirstPosition) {
  Hosts hosts;
  ASSERT_TRUE(parse_host_list("a:2,b:1,a:3", &hosts).ok());
  EXPECT_EQ(hosts, (Hosts{{"a", 5}, {"b", 1}}));
}

TEST(HostList, RejectsBadInputWithTheEntry) {
  Hosts hosts;
  struct Case {
    const char* text;
    const char* message_part;
  };
  for (const Case& c :
       {Case{"", "empty host list"}, Case{"a:2,,b", "empty entry"}, Case{"a:2,", "empty entry"},
        Case{"a:0", "'a:0': slots must be"}, Case{"a:x", "'a:x': slots must be"},
        Case{"a:", "'a:': slots must be"}, Case{":2", "'' is not a host name"},
        Case{"a b:2", "'a b' is not a host name"},
        // mpirun and ssh would take these for options.
        Case{"-x:2", "'-x' is not a host name: it starts with '-'"},
        Case{"a:1,-oProxyCommand=x", "'-oProxyCommand=x' is not a host name: it starts with '-'"},
        Case{"--host", "'--host' is not a host name: it starts with '-'"}}) {
    Status s = parse_host_list(c.text, &hosts);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.message().find(c.message_part), std::string::npos)
        << "input '" << c.text << "' gave: " << s.message();
  }
}

TEST(Hostfile, ParsesSlotsCommentsAndBlankLines) {
  Hosts hosts;
  const char* text =
      "# cluster\n"
      "node1 slots=4\n"
      "\n"
      "node2   slots=2   # the small one\n"
      "node3\n";
  ASSERT_TRUE(parse_hostfile(text, "hosts.txt", &hosts).ok());
  EXPECT_EQ(hosts, (Hosts{{"node1", 4}, {"node2", 2}, {"node3", 1}}));
}

TEST(Hostfile, ErrorsNameTheFileAndLine) {
  Hosts hosts;
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"a slots=2\nb slots=zero\n", "hosts.txt:2: 'slots=zero': slots must be"},
           Case{"a slots=2\n\nb max_slots=3\n", "hosts.txt:3: unexpected 'max_slots=3'"},
           Case{"a slots=0\n", "hosts.txt:1: 'slots=0'"},
           Case{"a slots=1 slots=2\n", "hosts.txt:1: slots= given twice"},
           Case{"b@c slots=1\n", "hosts.txt:1: 'b@c' is not a host name"},
           Case{"# nothing\n\n", "hosts.txt: no hosts listed"},
           Case{"a\n-oProxyCommand slots=2\n",
                "hosts.txt:2: '-oProxyCommand' is not a host name: it starts with '-'"},
           Case{"-x\n", "hosts.txt:1: '-x' is not a host name: it starts with '-'"},
       }) {
    Status s = parse_hostfile(c.text, "hosts.txt", &hosts);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
  }
}

TEST(Hostfile, ReadsFromDiskAndReportsMissingFiles) {
  const std::string path = ::testing::TempDir() + "kolo_hosts_test.txt";
  {
    std::ofstream f(path);
    f << "localhost slots=3\n";
  }
  Hosts hosts;
  ASSERT_TRUE(read_hostfile(path, &hosts).ok());
  EXPECT_EQ(hosts, (Hosts{{"localhost", 3}}));
  std::remove(path.c_str());

  Status s = read_hostfile(path, &hosts);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot read hostfile " + path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No such file"), std::string::npos) << s.message();
}

TEST(Hostfile, RefusesWhatIsTooLargeToBeAHostfile) {
  Hosts hosts;
  // A device that never ends: refused after reading just past the limit, not read forever.
  Status s = read_hostfile("/dev/zero", &hosts);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("hostfile /dev/zero is larger than 1048576 bytes"), std::string::npos)
      << s.message();

  s = parse_hostfile("a\n" + std::string(5000, 'b') + "\n", "hosts.txt", &hosts);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("hosts.txt:2: line is longer than 4096 bytes"), std::string::npos)
      << s.message();
  // A long comment is a long line too; a line at the limit is fine.
  EXPECT_TRUE(parse_hostfile("a slots=2 #" + std::string(4000, 'x') + "\n", "h", &hosts).ok());
  EXPECT_EQ(hosts, (Hosts{{"a", 2}}));
}

}  // namespace
}  // namespace kolo::launcher
