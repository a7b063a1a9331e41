// Tests for kolorun's own launcher plans: each worker's variables, the ssh command and
// its quoting, the secrets header, and the choice of the store's address.
#include "launcher/worker_plan.h"

#include <gtest/gtest.h>

#include "launcher/events.h"

namespace kolo::launcher {
namespace {

LaunchRequest request(int np, std::vector<HostSlots> hosts = {}) {
  LaunchRequest r;
  r.np = np;
  r.hosts = std::move(hosts);
  r.program = {"./train", "--name", "it's a \"test\" $HOME"};
  return r;
}

PlanInputs inputs() {
  PlanInputs in;
  in.env = {{"PATH", "/usr/bin"},
            {"HOME", "/root"},
            {"KOLO_LOG_LEVEL", "debug"},
            {"KOLO_RENDEZVOUS_SECRET", "outer"},
            {"KOLO_RANK", "7"}};
  in.this_host_names = {"me"};
  in.self_exe = "/opt/kolo/bin/kolorun";
  in.cwd = "/home/u/my dir";
  in.rendezvous_addr = "me:29500";
  in.this_host_addr = "me";
  in.cores = 4;
  return in;
}

TEST(WorkerPlan, OneHostRunsTheProgramWithTheRankVariables) {
  PlanInputs in = inputs();
  in.rendezvous_addr = "127.0.0.1:1234";
  in.this_host_addr = "127.0.0.1";
  const auto plans = plan_workers(request(2), in);
  ASSERT_EQ(plans.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const WorkerPlan& p = plans[static_cast<size_t>(r)];
    EXPECT_EQ(p.rank, r);
    EXPECT_EQ(p.host, "localhost");
    EXPECT_FALSE(p.remote);
    EXPECT_EQ(p.argv, request(2).program);
    EXPECT_EQ(p.vars.at("KOLO_RANK"), std::to_string(r));
    EXPECT_EQ(p.vars.at("KOLO_SIZE"), "2");
    EXPECT_EQ(p.vars.at("KOLO_LOCAL_RANK"), std::to_string(r));
    EXPECT_EQ(p.vars.at("KOLO_LOCAL_SIZE"), "2");
    EXPECT_EQ(p.vars.at("KOLO_CROSS_RANK"), "0");
    EXPECT_EQ(p.vars.at("KOLO_CROSS_SIZE"), "1");
    EXPECT_EQ(p.vars.at("KOLO_HOST_SLOTS"), "2");
    EXPECT_EQ(p.vars.at("KOLO_RENDEZVOUS_ADDR"), "127.0.0.1:1234");
    EXPECT_EQ(p.vars.at("KOLO_HOST_ADDR"), "127.0.0.1");
    EXPECT_EQ(p.vars.at("OMP_NUM_THREADS"), "2");  // 4 cores, 2 workers
    EXPECT_EQ(p.vars.count("KOLO_RENDEZVOUS_SECRET"), 0u);
  }
}

TEST(WorkerPlan, TheUsersThreadsAreLeftAlone) {
  PlanInputs in = inputs();
  in.env["OMP_NUM_THREADS"] = "3";
  EXPECT_EQ(plan_workers(request(2), in)[0].vars.count("OMP_NUM_THREADS"), 0u);
}

TEST(WorkerPlan, OtherHostsGoThroughSshWithTheRemoteWrapper) {
  // -H me:1,b:2 -np 3: rank 0 here, ranks 1-2 on b.
  const auto plans = plan_workers(request(3, {{"me", 1}, {"b", 2}}), inputs());
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_FALSE(plans[0].remote);
  EXPECT_EQ(plans[0].vars.at("KOLO_HOST_ADDR"), "me");
  const WorkerPlan& p = plans[2];
  EXPECT_TRUE(p.remote);
  EXPECT_EQ(p.host, "b");
  EXPECT_EQ(p.vars.at("KOLO_RANK"), "2");
  EXPECT_EQ(p.vars.at("KOLO_LOCAL_RANK"), "1");
  EXPECT_EQ(p.vars.at("KOLO_LOCAL_SIZE"), "2");
  EXPECT_EQ(p.vars.at("KOLO_CROSS_RANK"), "0");  // the only host with a local rank 1
  EXPECT_EQ(p.vars.at("KOLO_CROSS_SIZE"), "1");
  EXPECT_EQ(plans[1].vars.at("KOLO_CROSS_RANK"), "1");
  EXPECT_EQ(plans[1].vars.at("KOLO_CROSS_SIZE"), "2");
  EXPECT_EQ(p.vars.at("KOLO_HOST_SLOTS"), "1,2");
  EXPECT_EQ(p.vars.at("KOLO_HOST_ADDR"), "b");
  EXPECT_EQ(p.vars.at("KOLO_LOG_LEVEL"), "debug");  // KOLO_* travel, as with mpirun
  EXPECT_EQ(p.vars.at("PATH"), "/usr/bin");
  EXPECT_EQ(p.vars.count("HOME"), 0u);
  EXPECT_EQ(p.vars.count("KOLO_RENDEZVOUS_SECRET"), 0u);  // only on stdin
  EXPECT_EQ(p.vars.count("OMP_NUM_THREADS"), 0u);         // that host's cores decide
  ASSERT_EQ(p.argv.size(), 6u);
  EXPECT_EQ(std::vector<std::string>(p.argv.begin(), p.argv.begin() + 5),
            (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "--", "b"}));
  const std::string& cmd = p.argv[5];
  EXPECT_EQ(cmd.rfind("cd '/home/u/my dir' && exec env ", 0), 0u) << cmd;
  EXPECT_NE(cmd.find(" KOLO_RANK=2 "), std::string::npos) << cmd;
  EXPECT_NE(cmd.find(" /opt/kolo/bin/kolorun --remote-worker -- ./train --name "
                     "'it'\\''s a \"test\" $HOME'"),
            std::string::npos)
      << cmd;
  EXPECT_EQ(cmd.find("outer"), std::string::npos) << cmd;
}

TEST(WorkerPlan, TheSshPortIsPassed) {
  EXPECT_EQ(
      ssh_argv("b", 2222, "true"),
      (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-p", "2222", "--", "b", "true"}));
}

TEST(WorkerPlan, SshOptionsComeBeforeTheHost) {
  EXPECT_EQ(ssh_argv("b", 0, "true", {"-i", "/k/id", "-F", "/k/cfg"}),
            (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-i", "/k/id", "-F", "/k/cfg",
                                      "--", "b", "true"}));
}

TEST(WorkerPlan, RemoteCommandQuotesEveryWord) {
  const std::string cmd =
      remote_shell_command("/a b/'c'", {{"KOLO_X", "a b;rm -rf /"}, {"KOLO_Y", "$(id)"}},
                           "/k/kolorun", {"sh", "-c", "echo $KOLO_RANK; `id`", ""});
  EXPECT_EQ(cmd,
            "cd '/a b/'\\''c'\\''' && exec env 'KOLO_X=a b;rm -rf /' 'KOLO_Y=$(id)' /k/kolorun "
            "--remote-worker -- sh -c 'echo $KOLO_RANK; `id`' ''");
}

TEST(WorkerPlan, SecretsHeaderRoundTrips) {
  const std::string header = secrets_header({{"KOLO_RENDEZVOUS_SECRET", "00ff"}, {kTokenVar, "t"}});
  EXPECT_EQ(header, "KOLO_LAUNCHER_TOKEN=t\nKOLO_RENDEZVOUS_SECRET=00ff\n\n");
  std::string name, value;
  EXPECT_TRUE(parse_secret_line("KOLO_RENDEZVOUS_SECRET=00ff", &name, &value));
  EXPECT_EQ(name, "KOLO_RENDEZVOUS_SECRET");
  EXPECT_EQ(value, "00ff");
  EXPECT_FALSE(parse_secret_line("LD_PRELOAD=/x.so", &name, &value));  // KOLO_* only
  EXPECT_FALSE(parse_secret_line("KOLO_=x", &name, &value));
  EXPECT_FALSE(parse_secret_line("KOLO_X", &name, &value));
}

TEST(WorkerPlan, TheStoreAddressForSeveralHosts) {
  const std::vector<std::string> names = {"me.example.com", "me"};
  // This host's name in the list wins; localhost does not count (others cannot reach it).
  EXPECT_EQ(rendezvous_host({{"localhost", 1}, {"me", 1}, {"b", 1}}, names, ""), "me");
  EXPECT_EQ(rendezvous_host({{"b", 1}, {"me", 1}}, names, "10.0.0.5"), "10.0.0.5");
  EXPECT_EQ(rendezvous_host({{"localhost", 1}, {"b", 1}}, names, ""), std::nullopt);
  EXPECT_EQ(first_remote_host({{"localhost", 1}, {"127.0.0.2", 1}, {"b", 1}}, names), "b");
  // Only a numeric address of this host, not loopback, says where other hosts reach it.
  const std::vector<std::string> with_addrs = {"me", "127.0.0.1", "10.77.0.1", "::1", "fe80::5"};
  EXPECT_EQ(this_host_address({{"localhost", 2}, {"me", 1}, {"10.77.0.1", 2}}, with_addrs),
            "10.77.0.1");
  EXPECT_EQ(this_host_address({{"fe80::5", 1}}, with_addrs), "fe80::5");
  EXPECT_EQ(
      this_host_address({{"localhost", 2}, {"127.0.0.1", 1}, {"::1", 1}, {"me", 1}}, with_addrs),
      std::nullopt);
  EXPECT_EQ(this_host_address({{"10.77.0.2", 1}}, with_addrs), std::nullopt) << "another host";
  EXPECT_EQ(host_port("10.0.0.5", 80), "10.0.0.5:80");
  EXPECT_EQ(host_port("fe80::1", 80), "[fe80::1]:80");
}

}  // namespace
}  // namespace kolo::launcher
