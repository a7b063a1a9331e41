// parse_tf_config (startup/tf_config.h): TensorFlow's TF_CONFIG rules, each error case with
// its message. Ranks and the store made from it: launch_env_test.cc.
#include "startup/tf_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kolo::core {
namespace {

TfConfig parse_ok(const std::string& text) {
  TfConfig c;
  const Status s = parse_tf_config(text, &c);
  EXPECT_TRUE(s.ok()) << text << ": " << s.to_string();
  return c;
}

TEST(TfConfigTest, WorkersOnly) {
  const TfConfig c = parse_ok(
      R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]},
          "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(c.cluster.worker, (std::vector<std::string>{"localhost:12345", "localhost:23456"}));
  EXPECT_TRUE(c.cluster.chief.empty());
  EXPECT_EQ(c.task_type, "worker");
  EXPECT_EQ(c.task_index, 1);
}

TEST(TfConfigTest, AllJobsAndExtraKeys) {
  // rpc_layer, environment and other keys are TensorFlow's business: ignored.
  const TfConfig c = parse_ok(
      R"({"cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"],
                      "evaluator": ["e:1"]},
          "task": {"type": "chief", "index": "0"}, "rpc_layer": "grpc", "environment": "cloud"})");
  EXPECT_EQ(c.cluster.chief, (std::vector<std::string>{"c:1"}));
  EXPECT_EQ(c.cluster.worker.size(), 2u);
  EXPECT_EQ(c.cluster.ps, (std::vector<std::string>{"p:1"}));
  EXPECT_EQ(c.cluster.evaluator, (std::vector<std::string>{"e:1"}));
  EXPECT_EQ(c.task_type, "chief");
  EXPECT_EQ(c.task_index, 0);  // "0" as TensorFlow's int() reads it
}

TEST(TfConfigTest, NoClusterIsValid) {
  EXPECT_TRUE(parse_ok("{}").cluster.empty());
  EXPECT_TRUE(parse_ok(R"({"cluster": {}})").cluster.empty());
  EXPECT_TRUE(parse_ok(R"({"task": {"type": "worker", "index": 3}})").cluster.empty());
  // An evaluator outside the cluster is valid (TensorFlow allows it).
  EXPECT_EQ(
      parse_ok(R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "evaluator", "index": 0}})")
          .task_type,
      "evaluator");
}

struct ErrorCase {
  const char* text;
  const char* want;  // a part of the message
};

class TfConfigErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(TfConfigErrorTest, IsRefusedWithItsMessage) {
  TfConfig c;
  const Status s = parse_tf_config(GetParam().text, &c);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << GetParam().text;
  EXPECT_EQ(s.message().rfind("TF_CONFIG", 0), 0u) << s.message();
  EXPECT_NE(s.message().find(GetParam().want), std::string::npos)
      << "want '" << GetParam().want << "' in: " << s.message();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TfConfigErrorTest,
    testing::Values(
        // The JSON itself.
        ErrorCase{R"({"cluster": {"worker": ["a:1"]})", "not valid JSON: parse error at line 1"},
        ErrorCase{"", "not valid JSON"}, ErrorCase{"[1, 2]", "must be a JSON object"},
        ErrorCase{R"({"cluster": ["a:1"]})", "\"cluster\" must be an object of jobs"},
        // Jobs and addresses.
        ErrorCase{R"({"cluster": {"master": ["a:1"]}, "task": {"type": "master", "index": 0}})",
                  "the cluster's job 'master' is not recognized: valid jobs are \"chief\", "
                  "\"worker\", \"evaluator\" and \"ps\""},
        ErrorCase{R"({"cluster": {"worker": "a:1"}})",
                  "cluster job 'worker' must be a list of \"host:port\" strings"},
        ErrorCase{R"({"cluster": {"worker": {"0": "a:1"}}})", "sparse {index: address} form"},
        ErrorCase{R"({"cluster": {"worker": ["a:1", 7]}})",
                  "cluster worker 1 must be a \"host:port\" string, not 7"},
        ErrorCase{R"({"cluster": {"worker": ["a:1", "b"]}})",
                  "cluster worker 1 is 'b', not host:port"},
        ErrorCase{R"({"cluster": {"ps": ["p:99999"]}})",
                  "cluster ps 0 is 'p:99999', not host:port"},
        // The task.
        ErrorCase{R"({"cluster": {"worker": ["a:1"]}})",
                  "there is a cluster but no task: each process needs \"task\""},
        ErrorCase{R"({"cluster": {"worker": ["a:1"]}, "task": "worker"})",
                  "\"task\" must be an object"},
        ErrorCase{R"({"cluster": {"worker": ["a:1"]}, "task": {"index": 0}})",
                  "the task has no \"type\""},
        ErrorCase{R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}})",
                  "the task has no \"index\""},
        ErrorCase{R"({"cluster": {"worker": ["a:1"]}, "task": {"type": 1, "index": 0}})",
                  "the task's \"type\" must be a string, not 1"},
        ErrorCase{R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})",
                  "the task's \"index\" is -1, not a non-negative integer"},
        ErrorCase{R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0.5}})",
                  "the task's \"index\" is 0.5"},
        ErrorCase{R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "x"}})",
                  "the task's \"index\" is \"x\""},
        // TensorFlow's _validate_cluster_spec.
        ErrorCase{R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "master", "index": 0}})",
                  "Unrecognized task type 'master': valid task types are \"chief\", \"worker\", "
                  "\"evaluator\" and \"ps\""},
        ErrorCase{R"({"task": {"type": "boss", "index": 0}})", "Unrecognized task type 'boss'"},
        ErrorCase{R"({"cluster": {"worker": ["a:1"], "ps": ["p:1"]},
                     "task": {"type": "chief", "index": 0}})",
                  "task type 'chief' not found in the cluster (its jobs: worker, ps)"},
        ErrorCase{R"({"cluster": {"chief": ["a:1", "b:1"], "worker": ["c:1"]},
                     "task": {"type": "worker", "index": 0}})",
                  "There must be at most one 'chief' task; the cluster lists 2 (a:1, b:1)"},
        ErrorCase{R"({"cluster": {"worker": ["c:1"], "evaluator": ["e:1", "e:2"]},
                     "task": {"type": "worker", "index": 0}})",
                  "There must be at most one 'evaluator' task"},
        ErrorCase{
            R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}})",
            "task index 2 exceeds the maximum index 1 of job 'worker' (2 tasks: a:1, b:1)"},
        ErrorCase{R"({"cluster": {"chief": ["a:1"]}, "task": {"type": "chief", "index": 1}})",
                  "task index 1 exceeds the maximum index 0 of job 'chief' (1 task: a:1)"}));

}  // namespace
}  // namespace kolo::core

namespace kolo::core {
namespace {

TEST(TfConfigTest, FromTheEnvironment) {
  TfConfig c;
  c.task_type = "stale";
  bool present = true;
  ASSERT_TRUE(parse_tf_config_from_env(Env{}, &c, &present).ok());
  EXPECT_FALSE(present);
  EXPECT_EQ(c.task_type, "");
  ASSERT_TRUE(parse_tf_config_from_env(Env{{"TF_CONFIG", ""}}, &c, &present).ok());
  EXPECT_FALSE(present);
  const Env env = {{"TF_CONFIG", R"({"cluster": {"worker": ["w:1"], "ps": ["p:1"]},
                                    "task": {"type": "ps", "index": 0}})"}};
  ASSERT_TRUE(parse_tf_config_from_env(env, &c, &present).ok());
  EXPECT_TRUE(present);
  EXPECT_EQ(c.task_type, "ps");
  EXPECT_EQ(c.cluster.ps, (std::vector<std::string>{"p:1"}));
  const Status s = parse_tf_config_from_env(Env{{"TF_CONFIG", "{"}}, &c, &present);
  EXPECT_TRUE(present);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("TF_CONFIG: not valid JSON"), std::string::npos) << s.message();
}

TEST(TfConfigTest, PsClusterNeedsAWorkerThenAPs) {
  TfCluster c;
  c.chief = {"c:1"};
  Status s = validate_ps_cluster(c);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  // TensorFlow's order: the workers are checked first.
  EXPECT_EQ(s.message().rfind("There must be at least one worker.", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("the cluster has chief x1"), std::string::npos) << s.message();
  c.worker = {"w:1", "w:2"};
  s = validate_ps_cluster(c);
  EXPECT_EQ(s.message().rfind("There must be at least one ps.", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("chief x1, worker x2"), std::string::npos) << s.message();
  EXPECT_EQ(validate_ps_cluster(TfCluster{}).message().rfind(kNoWorkerMessage, 0), 0u);
  c.ps = {"p:1"};
  EXPECT_TRUE(validate_ps_cluster(c).ok());
}

TEST(TfConfigTest, TaskNamesAreTensorFlowsDeviceNames) {
  EXPECT_EQ(tf_task_name("worker", 1), "/job:worker/replica:0/task:1");
  EXPECT_EQ(tf_task_name("ps", 0), "/job:ps/replica:0/task:0");
  EXPECT_EQ(tf_task_name("chief", 0), "/job:chief/replica:0/task:0");
}

}  // namespace
}  // namespace kolo::core
