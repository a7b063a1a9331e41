// Tests for a parameter-server job's plan (ps_plan.h): the checks of the command line,
// where each task runs, its ports, its TF_CONFIG (read back with parse_tf_config) and its
// variables.
#include "launcher/ps_plan.h"

#include <gtest/gtest.h>

#include "startup/tf_config.h"

namespace kolo::launcher {
namespace {

LaunchRequest ps_request(int workers, int ps, bool evaluator = false,
                         std::vector<HostSlots> hosts = {}) {
  LaunchRequest r;
  r.np = workers;
  r.ps = ps;
  r.evaluator = evaluator;
  r.hosts = std::move(hosts);
  if (!r.hosts.empty()) r.hosts_source = "-H " + format_host_list(r.hosts);
  r.program = {"./train", "--steps", "10"};
  return r;
}

PlanInputs inputs() {
  PlanInputs in;
  in.env = {{"PATH", "/usr/bin"}, {"KOLO_LOG_LEVEL", "debug"}, {"KOLO_RENDEZVOUS_SECRET", "old"},
            {"KOLO_RANK", "7"},   {"KOLO_SIZE", "8"},          {"KOLO_HOST_SLOTS", "8"}};
  in.this_host_names = {"me"};
  in.self_exe = "/opt/kolo/bin/kolorun";
  in.cwd = "/home/u";
  in.rendezvous_addr = "127.0.0.1:1234";
  in.cores = 10;
  return in;
}

std::string where(const std::vector<PsTask>& tasks) {
  std::string s;
  for (const auto& t : tasks) s += (s.empty() ? "" : " ") + t.name() + "@" + t.host;
  return s;
}

TEST(PsPlan, TensorFlowsErrorsForNoWorkerOrNoPs) {
  Status s = validate_ps_job(ps_request(2, 0));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--ps 0: There must be at least one ps."), std::string::npos)
      << s.message();
  s = validate_ps_job(ps_request(0, 2));
  EXPECT_NE(s.message().find("There must be at least one worker."), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("-np M workers (M >= 1)"), std::string::npos) << s.message();
  // Workers first, as TensorFlow checks them.
  s = validate_ps_job(ps_request(0, 0));
  EXPECT_NE(s.message().find(core::kNoWorkerMessage), std::string::npos) << s.message();
  EXPECT_TRUE(validate_ps_job(ps_request(1, 1)).ok());
}

TEST(PsPlan, EveryTaskNeedsASlot) {
  const Status s = validate_ps_job(ps_request(2, 2, true, {{"a", 2}, {"b", 3}}));
  EXPECT_EQ(s.message(),
            "a parameter-server job of 1 chief, 2 workers, 2 ps tasks and 1 evaluator needs 6 "
            "slots but -H a:2,b:3 has 5 (a:2,b:3); add hosts or slots, or lower -np or --ps");
  EXPECT_TRUE(validate_ps_job(ps_request(2, 2, false, {{"a", 2}, {"b", 3}})).ok());
  LaunchRequest r = ps_request(1, 1);
  r.max_restarts = -1;
  EXPECT_NE(validate_ps_job(r).message().find("--max-restarts -1 is not valid"), std::string::npos);
  r.program.clear();
  r.max_restarts = 0;
  EXPECT_NE(validate_ps_job(r).message().find("no program given"), std::string::npos);
}

TEST(PsPlan, TasksArePackedOverTheSlotsChiefWorkersPsEvaluator) {
  const auto r = ps_request(2, 2, true, {{"a", 2}, {"me", 3}, {"c", 4}});
  ASSERT_EQ(ps_task_count(r), 6);
  const auto tasks = place_ps_tasks(r, {"me"}, "10.0.0.1");
  EXPECT_EQ(where(tasks), "chief 0@a worker 0@a worker 1@me ps 0@me ps 1@me evaluator 0@c");
  for (size_t i = 0; i < tasks.size(); ++i) EXPECT_EQ(tasks[i].rank, static_cast<int>(i));
  EXPECT_TRUE(tasks[0].remote);
  EXPECT_EQ(tasks[0].addr_host, "a");
  EXPECT_FALSE(tasks[2].remote);
  EXPECT_EQ(tasks[2].addr_host, "10.0.0.1");  // this host's tasks: the store's host
  EXPECT_FALSE(tasks[5].in_cluster());
  // One host: every task here.
  const auto here = place_ps_tasks(ps_request(1, 2), {"me"}, "127.0.0.1");
  EXPECT_EQ(where(here), "chief 0@localhost worker 0@localhost ps 0@localhost ps 1@localhost");
}

TEST(PsPlan, PortsLocalFromTheProbeRemoteFromTheBasePerHost) {
  const auto r = ps_request(2, 2, true, {{"a", 2}, {"me", 2}, {"b", 2}});
  auto tasks = place_ps_tasks(r, {"me"}, "me");
  // chief@a worker0@a worker1@me ps0@me ps1@b evaluator@b
  EXPECT_EQ(local_ports_needed(tasks), 2);
  assign_ports({41000, 41007}, 25000, &tasks);
  std::vector<int> ports;
  for (const auto& t : tasks) ports.push_back(t.port);
  EXPECT_EQ(ports, (std::vector<int>{25000, 25001, 41000, 41007, 25000, 0}));
}

TEST(PsPlan, EachTfConfigParsesAndTheyAgreeOnTheCluster) {
  auto tasks = place_ps_tasks(ps_request(2, 2, true), {}, "127.0.0.1");
  assign_ports({5001, 5002, 5003, 5004, 5005}, 25000, &tasks);
  EXPECT_EQ(
      ps_tf_config(tasks, 1),
      R"({"cluster":{"chief":["127.0.0.1:5001"],"worker":["127.0.0.1:5002","127.0.0.1:5003"],)"
      R"("ps":["127.0.0.1:5004","127.0.0.1:5005"]},"task":{"type":"worker","index":0}})");
  for (size_t i = 0; i < tasks.size(); ++i) {
    core::TfConfig c;
    const Status s = core::parse_tf_config(ps_tf_config(tasks, i), &c);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(c.task_type, tasks[i].type);
    EXPECT_EQ(c.task_index, tasks[i].index);
    EXPECT_EQ(c.cluster.chief, (std::vector<std::string>{"127.0.0.1:5001"}));
    EXPECT_EQ(c.cluster.worker.size(), 2u);
    EXPECT_EQ(c.cluster.ps, (std::vector<std::string>{"127.0.0.1:5004", "127.0.0.1:5005"}));
    EXPECT_TRUE(c.cluster.evaluator.empty());  // TensorFlow's evaluator is outside the cluster
    EXPECT_TRUE(core::validate_ps_cluster(c.cluster).ok());
  }
}

TEST(PsPlan, AnIpv6HostIsBracketed) {
  auto tasks = place_ps_tasks(ps_request(1, 1), {}, "::1");
  assign_ports({7001, 7002, 7003}, 25000, &tasks);
  core::TfConfig c;
  ASSERT_TRUE(core::parse_tf_config(ps_tf_config(tasks, 2), &c).ok());
  EXPECT_EQ(c.cluster.ps, (std::vector<std::string>{"[::1]:7003"}));
}

TEST(PsPlan, VariablesOfEachTaskAndNoRankVariables) {
  const auto r = ps_request(1, 1, false, {{"me", 2}, {"b", 1}});
  PlanInputs in = inputs();
  in.rendezvous_addr = "me:1234";
  in.this_host_addr = "me";
  auto tasks = place_ps_tasks(r, in.this_host_names, in.this_host_addr);
  assign_ports({6001, 6002}, 25000, &tasks);
  const auto plans = plan_ps_tasks(r, in, tasks);
  ASSERT_EQ(plans.size(), 3u);
  const WorkerPlan& chief = plans[0];
  EXPECT_EQ(worker_label(chief), "chief:0");
  EXPECT_EQ(worker_name(plans[2]), "ps 0");
  EXPECT_FALSE(chief.remote);
  EXPECT_EQ(chief.argv, r.program);
  EXPECT_EQ(chief.vars.at("TF_CONFIG"), ps_tf_config(tasks, 0));
  EXPECT_EQ(chief.vars.at("KOLO_TASK_TYPE"), "chief");
  EXPECT_EQ(chief.vars.at("KOLO_TASK_INDEX"), "0");
  EXPECT_EQ(chief.vars.at("KOLO_RENDEZVOUS_ADDR"), "me:1234");
  EXPECT_EQ(chief.vars.at("KOLO_HOST_ADDR"), "me");
  EXPECT_EQ(chief.vars.at("KOLO_LOCAL_SIZE"), "2");
  EXPECT_EQ(chief.vars.at("OMP_NUM_THREADS"), "5");  // 10 cores, 2 tasks here
  for (const auto& p : plans) {
    EXPECT_EQ(p.vars.count("KOLO_RANK"), 0u) << worker_label(p);
    EXPECT_EQ(p.vars.count("KOLO_SIZE"), 0u) << worker_label(p);
    EXPECT_EQ(p.vars.count("KOLO_RENDEZVOUS_SECRET"), 0u) << worker_label(p);
  }
  // The ps on b: through ssh, its variables on the command line, the outer job's ranks and
  // secret left out.
  const WorkerPlan& ps = plans[2];
  EXPECT_TRUE(ps.remote);
  EXPECT_EQ(ps.argv[0], "ssh");
  EXPECT_EQ(ps.vars.at("KOLO_TASK_TYPE"), "ps");
  EXPECT_EQ(ps.vars.at("KOLO_HOST_ADDR"), "b");
  EXPECT_EQ(ps.vars.at("KOLO_LOG_LEVEL"), "debug");
  const std::string command = ps.argv.back();
  EXPECT_NE(command.find("--remote-worker"), std::string::npos);
  EXPECT_NE(command.find("b:25000"), std::string::npos) << command;
  EXPECT_EQ(command.find("KOLO_RANK"), std::string::npos) << command;
  EXPECT_EQ(command.find("old"), std::string::npos) << command;
  EXPECT_TRUE(is_rank_variable("KOLO_CROSS_RANK"));
  EXPECT_FALSE(is_rank_variable("KOLO_LOG_LEVEL"));
}

}  // namespace
}  // namespace kolo::launcher
