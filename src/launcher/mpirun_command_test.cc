// Tests for validating kolorun's options and building the mpirun command from them.
#include "launcher/mpirun_command.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kolo::launcher {
namespace {

LaunchRequest request(int np, std::vector<HostSlots> hosts = {}) {
  LaunchRequest r;
  r.np = np;
  r.hosts = std::move(hosts);
  r.hosts_source = "-H test";
  r.program = {"./train", "--epochs", "3"};
  return r;
}

MpirunInputs inputs(bool root = false) {
  MpirunInputs in;
  in.as_root = root;
  in.self_exe = "/opt/kolo/bin/kolorun";
  in.env = {{"PATH", "/usr/bin"},
            {"HOME", "/root"},
            {"KOLO_LOG_LEVEL", "info"},
            {"KOLO_HOST_SLOTS", "9"},
            {"OMPI_MCA_x", "1"}};
  return in;
}

// The value after `flag` in argv, or "" if absent.
std::string after(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it == argv.end() || it + 1 == argv.end() ? "" : *(it + 1);
}

bool has(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

TEST(MpirunCommand, SingleHost) {
  const auto argv = mpirun_argv(request(3), inputs());
  const std::vector<std::string> want = {"mpirun",
                                         "--oversubscribe",
                                         "-np",
                                         "3",
                                         "--map-by",
                                         "slot",
                                         "--bind-to",
                                         "none",
                                         "--mca",
                                         "orte_abort_on_non_zero_status",
                                         "1",
                                         "--mca",
                                         "pml",
                                         "ob1",
                                         "--mca",
                                         "btl",
                                         "self,vader",
                                         "--mca",
                                         "oob_tcp_if_include",
                                         "127.0.0.0/8",
                                         "-x",
                                         "KOLO_LOG_LEVEL",
                                         "-x",
                                         "PATH",
                                         "-x",
                                         "KOLO_HOST_SLOTS=3",
                                         "/opt/kolo/bin/kolorun",
                                         "--worker-shim",
                                         "--linger-seconds=35",
                                         "--",
                                         "./train",
                                         "--epochs",
                                         "3"};
  EXPECT_EQ(argv, want);
}

// A one-host job keeps off the network: no TCP transport (whose listeners bind to any
// address), and mpirun's connections over loopback. A job on other hosts needs both.
TEST(MpirunCommand, OneHostJobsStayOffTheNetwork) {
  for (const auto& hosts : {std::vector<HostSlots>{}, std::vector<HostSlots>{{"localhost", 2}},
                            std::vector<HostSlots>{{"node1", 2}}}) {
    MpirunInputs in = inputs();
    in.this_host_names = {"node1"};
    const auto argv = mpirun_argv(request(2, hosts), in);
    EXPECT_EQ(after(argv, "pml"), "ob1") << shell_join(argv);
    EXPECT_EQ(after(argv, "btl"), "self,vader") << shell_join(argv);
    EXPECT_EQ(after(argv, "oob_tcp_if_include"), "127.0.0.0/8") << shell_join(argv);
  }
  MpirunInputs in = inputs();
  in.this_host_names = {"node1"};
  auto argv = mpirun_argv(request(2, {{"node1", 1}, {"node2", 1}}), in);
  EXPECT_FALSE(has(argv, "pml")) << shell_join(argv);
  EXPECT_FALSE(has(argv, "btl")) << shell_join(argv);
  EXPECT_FALSE(has(argv, "oob_tcp_if_include")) << shell_join(argv);
  // The user's own choice (OMPI_MCA_* in the environment) wins.
  in.env["OMPI_MCA_pml"] = "ucx";
  in.env["OMPI_MCA_btl"] = "self,tcp";
  in.env["OMPI_MCA_oob_tcp_if_include"] = "eth0";
  argv = mpirun_argv(request(2), in);
  EXPECT_FALSE(has(argv, "pml")) << shell_join(argv);
  EXPECT_FALSE(has(argv, "btl")) << shell_join(argv);
  EXPECT_FALSE(has(argv, "oob_tcp_if_include")) << shell_join(argv);
}

TEST(MpirunCommand, SharedMemorySegmentsGoToTheJobsOwnDirectory) {
  EXPECT_FALSE(has(mpirun_argv(request(2), inputs()), "btl_vader_backing_directory"));
  MpirunInputs in = inputs();
  in.shm_dir = "/dev/shm/kolo.abc123";
  EXPECT_EQ(after(mpirun_argv(request(2), in), "btl_vader_backing_directory"),
            "/dev/shm/kolo.abc123");
}

TEST(MpirunCommand, KnowsWhichJobsRunOnThisHostOnly) {
  EXPECT_TRUE(runs_on_this_host_only(request(2), {"node1"}));
  EXPECT_TRUE(runs_on_this_host_only(request(2, {{"localhost", 2}}), {"node1"}));
  EXPECT_TRUE(runs_on_this_host_only(request(2, {{"127.0.0.1", 2}}), {"node1"}));
  EXPECT_TRUE(runs_on_this_host_only(request(2, {{"node1", 1}, {"localhost", 1}}), {"node1"}));
  EXPECT_FALSE(runs_on_this_host_only(request(2, {{"node1", 1}, {"node2", 1}}), {"node1"}));
}

TEST(MpirunCommand, RootNeedsAllowRunAsRoot) {
  EXPECT_FALSE(has(mpirun_argv(request(2), inputs(false)), "--allow-run-as-root"));
  const auto argv = mpirun_argv(request(2), inputs(true));
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[1], "--allow-run-as-root");
}

TEST(MpirunCommand, HostsBecomeHostListAndLayout) {
  const auto argv = mpirun_argv(request(4, {{"a", 2}, {"b", 2}}), inputs());
  EXPECT_EQ(after(argv, "--host"), "a:2,b:2");
  EXPECT_TRUE(has(argv, "orte_keep_fqdn_hostnames"));
  EXPECT_TRUE(has(argv, "KOLO_HOST_SLOTS=2,2"));
  EXPECT_EQ(after(argv, "-np"), "4");
}

TEST(MpirunCommand, FewerWorkersThanSlotsFillTheFirstHostsFirst) {
  // A hostfile is parsed into the same host list as -H.
  const auto argv = mpirun_argv(request(5, {{"n1", 4}, {"n2", 4}, {"n3", 4}}), inputs());
  EXPECT_EQ(after(argv, "--host"), "n1:4,n2:4,n3:4");
  EXPECT_TRUE(has(argv, "KOLO_HOST_SLOTS=4,1"));
}

TEST(MpirunCommand, GraceSetsTheShimsLinger) {
  LaunchRequest r = request(2);
  r.grace_seconds = 0.5;
  EXPECT_TRUE(has(mpirun_argv(r, inputs()), "--linger-seconds=30.5"));
}

TEST(MpirunCommand, ExportsKoloPathAndLibraryPathOnly) {
  EXPECT_EQ(exported_variables({{"PATH", "p"},
                                {"LD_LIBRARY_PATH", "l"},
                                {"KOLO_TRANSPORT", "mpi"},
                                {"KOLO_HOST_SLOTS", "2"},
                                {"HOME", "h"},
                                {"XKOLO_A", "1"}}),
            (std::vector<std::string>{"KOLO_TRANSPORT", "LD_LIBRARY_PATH", "PATH"}));
}

TEST(Validate, ChecksWorkersProgramAndSlots) {
  EXPECT_TRUE(validate(request(4, {{"a", 2}, {"b", 2}})).ok());
  EXPECT_TRUE(validate(request(64)).ok());  // one host: any number (oversubscribed)

  Status s = validate(request(0));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("-np must be at least 1"), std::string::npos) << s.message();

  LaunchRequest no_program = request(2);
  no_program.program.clear();
  s = validate(no_program);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no program given"), std::string::npos) << s.message();

  LaunchRequest r = request(3, {{"localhost", 2}});
  r.hosts_source = "-H localhost:2";
  s = validate(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("-np 3 needs 3 slots but -H localhost:2 has 2"), std::string::npos)
      << s.message();
}

TEST(MachineLimits, RefusesMoreWorkersThanThisHostCanStart) {
  MachineLimits limits;
  limits.open_files = 20000;
  limits.open_files_hard = 20000;
  EXPECT_TRUE(check_machine_limits(request(64), limits, {}).ok());
  EXPECT_TRUE(check_machine_limits(request(4096), limits, {}).ok());  // 16448 files

  // The cap, on any host.
  Status s = check_machine_limits(request(100000), limits, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("-np 100000 puts 100000 workers on this host; kolorun starts at "
                             "most 4096 on one host"),
            std::string::npos)
      << s.message();
  s = check_machine_limits(request(5000, {{"a", 100}, {"b", 4900}}), limits, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("puts 4900 workers on b;"), std::string::npos) << s.message();

  // The open-file limit, for the workers on this host only.
  limits.open_files = 256;
  limits.open_files_hard = 1024;
  s = check_machine_limits(request(60), limits, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("-np 60 starts 60 workers on this host, and mpirun needs about 304 "
                             "open files for them, but the open-file limit (ulimit -n) is 256, "
                             "enough for 48: raise it (ulimit -n 304) or lower -np"),
            std::string::npos)
      << s.message();
  // Under kolorun's own launcher the message names kolorun, not an mpirun that never runs.
  s = check_machine_limits(request(60), limits, {}, "kolorun");
  EXPECT_NE(s.message().find("-np 60 starts 60 workers on this host, and kolorun needs about 304 "
                             "open files for them"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(check_machine_limits(request(48), limits, {}).ok());
  EXPECT_FALSE(check_machine_limits(request(60, {{"localhost", 60}}), limits, {}).ok());
  EXPECT_FALSE(check_machine_limits(request(60, {{"node1", 60}}), limits, {"node1"}).ok());
  EXPECT_TRUE(check_machine_limits(request(60, {{"node2", 60}}), limits, {"node1"}).ok());
  limits.open_files_hard = 300;
  s = check_machine_limits(request(60), limits, {});
  EXPECT_NE(s.message().find("the hard limit is 300, which only root can raise"), std::string::npos)
      << s.message();

  // The process limit.
  limits = MachineLimits{};
  limits.processes = 100;
  s = check_machine_limits(request(60), limits, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("at least 136 processes, but the process limit (ulimit -u) is 100"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(check_machine_limits(request(42), limits, {}).ok());
}

TEST(ShellJoin, QuotesWhatTheShellWouldSplit) {
  EXPECT_EQ(shell_join({"mpirun", "-np", "2", "sh", "-c", "echo $KOLO_RANK", "it's", ""}),
            "mpirun -np 2 sh -c 'echo $KOLO_RANK' 'it'\\''s' ''");
  EXPECT_EQ(shell_join({"a:2,b:2", "KOLO_HOST_SLOTS=2,2", "/x/y"}),
            "a:2,b:2 KOLO_HOST_SLOTS=2,2 /x/y");
}

}  // namespace
}  // namespace kolo::launcher
