// detect_launch_env (startup/launch_env.h): each launcher's variables and their precedence,
// the store of each kind of job, and auto_transport. TF_CONFIG's own rules and messages:
// tf_config_test.cc.
#include "startup/launch_env.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <tuple>

namespace kolo::core {
namespace {

LaunchEnv detect_launch_env(const Env& env) {
  LaunchEnv e;
  const Status s = core::detect_launch_env(env, &e);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return e;
}

// The error detect_launch_env gives for `env`.
Status detect_error(const Env& env) {
  LaunchEnv e;
  const Status s = core::detect_launch_env(env, &e);
  EXPECT_FALSE(s.ok()) << "no error; launcher " << e.launcher;
  return s;
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

void expect_env(const LaunchEnv& e, const char* launcher, int rank, int size, int local_rank,
                int local_size) {
  EXPECT_EQ(e.launcher, launcher);
  EXPECT_EQ(e.rank, rank);
  EXPECT_EQ(e.size, size);
  EXPECT_EQ(e.local_rank, local_rank);
  EXPECT_EQ(e.local_size, local_size);
}

const Env kKolorun = {
    {"KOLO_RANK", "5"}, {"KOLO_SIZE", "8"}, {"KOLO_LOCAL_RANK", "1"}, {"KOLO_LOCAL_SIZE", "4"}};
const Env kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "3"},
                      {"OMPI_COMM_WORLD_SIZE", "6"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}};
const Env kPmi = {
    {"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}};
const Env kSlurm = {{"SLURM_PROCID", "7"},
                    {"SLURM_NTASKS", "12"},
                    {"SLURM_LOCALID", "3"},
                    {"SLURM_NTASKS_PER_NODE", "4"}};

Env merge(std::initializer_list<Env> envs) {
  Env out;
  for (const auto& e : envs) out.insert(e.begin(), e.end());
  return out;
}

TEST(LaunchEnvTest, NothingSetIsASingleProcess) {
  expect_env(detect_launch_env({}), "none", 0, 1, 0, 1);
  expect_env(detect_launch_env({{"PATH", "/bin"}, {"KOLO_LOG_LEVEL", "debug"}}), "none", 0, 1, 0,
             1);
}

TEST(LaunchEnvTest, Kolorun) {
  expect_env(detect_launch_env(kKolorun), "kolorun", 5, 8, 1, 4);
  // Without local variables: local rank 0 and every rank on this host.
  expect_env(detect_launch_env({{"KOLO_RANK", "2"}, {"KOLO_SIZE", "3"}}), "kolorun", 2, 3, 0, 3);
}

TEST(LaunchEnvTest, OpenMpi) { expect_env(detect_launch_env(kOpenMpi), "mpirun", 3, 6, 0, 3); }

TEST(LaunchEnvTest, MpichPmi) {
  expect_env(detect_launch_env(kPmi), "pmi", 2, 4, 0, 2);
  expect_env(detect_launch_env({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}), "pmi", 1, 2, 0, 2);
}

TEST(LaunchEnvTest, Slurm) {
  expect_env(detect_launch_env(kSlurm), "slurm", 7, 12, 3, 4);
  // One node: every task is local.
  expect_env(detect_launch_env({{"SLURM_PROCID", "1"},
                                {"SLURM_NTASKS", "2"},
                                {"SLURM_LOCALID", "1"},
                                {"SLURM_NNODES", "1"}}),
             "slurm", 1, 2, 1, 2);
}

// Slurm compresses SLURM_NTASKS_PER_NODE as "2(x3)" (2 tasks on each of 3 nodes); the
// leading number is this node's count.
TEST(LaunchEnvTest, SlurmCompressedTasksPerNode) {
  expect_env(detect_launch_env({{"SLURM_PROCID", "4"},
                                {"SLURM_NTASKS", "6"},
                                {"SLURM_LOCALID", "0"},
                                {"SLURM_NNODES", "3"},
                                {"SLURM_NTASKS_PER_NODE", "2(x3)"}}),
             "slurm", 4, 6, 0, 2);
}

TEST(LaunchEnvTest, Precedence) {
  expect_env(detect_launch_env(merge({kKolorun, kOpenMpi, kPmi, kSlurm})), "kolorun", 5, 8, 1, 4);
  expect_env(detect_launch_env(merge({kOpenMpi, kPmi, kSlurm})), "mpirun", 3, 6, 0, 3);
  expect_env(detect_launch_env(merge({kPmi, kSlurm})), "pmi", 2, 4, 0, 2);
}

TEST(LaunchEnvTest, IncompleteOrMalformedVariablesAreSkipped) {
  // A rank without a size (or a non-number) does not count as a launcher.
  expect_env(detect_launch_env({{"KOLO_RANK", "1"}}), "none", 0, 1, 0, 1);
  expect_env(detect_launch_env({{"KOLO_RANK", "one"}, {"KOLO_SIZE", "2"}}), "none", 0, 1, 0, 1);
  expect_env(detect_launch_env({{"KOLO_RANK", ""}, {"KOLO_SIZE", "2"}}), "none", 0, 1, 0, 1);
  // ...so the next launcher's variables are used.
  const Env env = merge({kOpenMpi, {{"KOLO_RANK", "1x"}, {"KOLO_SIZE", "2"}}});
  expect_env(detect_launch_env(env), "mpirun", 3, 6, 0, 3);
}

// --- kolorun's own launcher: a store job when KOLO_RENDEZVOUS_ADDR is set ---

TEST(LaunchEnvTest, KolorunWithAStoreAddress) {
  const LaunchEnv e = detect_launch_env(
      merge({kKolorun,
             {{"KOLO_RENDEZVOUS_ADDR", "10.0.0.1:29500"}, {"KOLO_RENDEZVOUS_SECRET", "s3cret"}}}));
  expect_env(e, "kolorun", 5, 8, 1, 4);
  EXPECT_TRUE(e.uses_store());
  EXPECT_EQ(e.store_host, "10.0.0.1");
  EXPECT_EQ(e.store_port, 29500);
  EXPECT_FALSE(e.hosts_store);  // kolorun runs the server
  EXPECT_EQ(e.secret, "s3cret");
  EXPECT_EQ(e.store_owner(), "kolorun");
  EXPECT_EQ(e.rank_name(3), "rank 3");
  // Without it: kolorun's mpirun path, no store, and no secret kept.
  const LaunchEnv m = detect_launch_env(merge({kKolorun, {{"KOLO_RENDEZVOUS_SECRET", "x"}}}));
  EXPECT_FALSE(m.uses_store());
  EXPECT_EQ(m.secret, "");
}

TEST(LaunchEnvTest, BadRendezvousAddressIsAnError) {
  for (const char* addr : {"10.0.0.1", "host:", ":29500", "host:0", "host:65536", "host:29x",
                           "::1:29500", "[::1]29500"}) {
    const Status s = detect_error(merge({kKolorun, {{"KOLO_RENDEZVOUS_ADDR", addr}}}));
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << addr;
    EXPECT_CONTAINS(s.message(), std::string("KOLO_RENDEZVOUS_ADDR=") + addr);
    EXPECT_CONTAINS(s.message(), "host:port");
  }
  const LaunchEnv v6 = detect_launch_env(merge({kKolorun, {{"KOLO_RENDEZVOUS_ADDR", "[::1]:7"}}}));
  EXPECT_EQ(v6.store_host, "::1");
  EXPECT_EQ(v6.store_port, 7);
}

// --- TF_CONFIG ---

Env tf(const std::string& cluster, const std::string& type, int index) {
  return {{"TF_CONFIG", "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"" + type +
                            "\", \"index\": " + std::to_string(index) + "}}"}};
}

const char* kWorkers = R"({"worker": ["localhost:12345", "localhost:23456", "otherhost:3456"]})";
const char* kChiefAndWorkers =
    R"({"chief": ["hostc:2222"], "worker": ["hosta:2222", "hostb:2222", "hosta:2223"]})";

TEST(LaunchEnvTest, TfConfigWorkersOnly) {
  // Worker 0 is rank 0 and hosts the store at its own address (loopback: binds loopback).
  const LaunchEnv w0 = detect_launch_env(tf(kWorkers, "worker", 0));
  expect_env(w0, "tf_config", 0, 3, 0, 2);
  EXPECT_EQ(w0.task_type, "worker");
  EXPECT_EQ(w0.task_index, 0);
  EXPECT_TRUE(w0.uses_store());
  EXPECT_TRUE(w0.hosts_store);
  EXPECT_EQ(w0.store_host, "localhost");
  EXPECT_EQ(w0.store_port, 12345);
  EXPECT_EQ(w0.store_bind, "127.0.0.1");
  EXPECT_EQ(w0.cluster.worker.size(), 3u);
  ASSERT_EQ(w0.rank_names.size(), 3u);
  EXPECT_EQ(w0.rank_name(1), "worker 1 (localhost:23456)");
  EXPECT_EQ(w0.store_owner(), "worker 0 (localhost:12345)");

  const LaunchEnv w1 = detect_launch_env(tf(kWorkers, "worker", 1));
  expect_env(w1, "tf_config", 1, 3, 1, 2);  // the second task on "localhost"
  EXPECT_FALSE(w1.hosts_store);
  EXPECT_EQ(w1.store_host, "localhost");
  EXPECT_EQ(w1.store_port, 12345);

  const LaunchEnv w2 = detect_launch_env(tf(kWorkers, "worker", 2));
  expect_env(w2, "tf_config", 2, 3, 0, 1);  // alone on "otherhost"
}

TEST(LaunchEnvTest, TfConfigChiefIsRankZeroAndHostsTheStore) {
  const LaunchEnv c = detect_launch_env(tf(kChiefAndWorkers, "chief", 0));
  expect_env(c, "tf_config", 0, 4, 0, 1);
  EXPECT_TRUE(c.hosts_store);
  EXPECT_EQ(c.store_host, "hostc");
  EXPECT_EQ(c.store_port, 2222);
  EXPECT_EQ(c.store_bind, "0.0.0.0");  // other hosts must reach it
  EXPECT_EQ(c.rank_name(0), "chief 0 (hostc:2222)");
  EXPECT_EQ(c.rank_name(3), "worker 2 (hosta:2223)");

  // Workers follow the chief: worker i is rank i + 1.
  const LaunchEnv w = detect_launch_env(tf(kChiefAndWorkers, "worker", 2));
  expect_env(w, "tf_config", 3, 4, 1, 2);  // hosta has workers 0 and 2
  EXPECT_FALSE(w.hosts_store);
  EXPECT_EQ(w.store_host, "hostc");
  EXPECT_EQ(w.store_owner(), "chief 0 (hostc:2222)");
  const LaunchEnv w0 = detect_launch_env(tf(kChiefAndWorkers, "worker", 0));
  EXPECT_EQ(w0.rank, 1);
  // Every task of the cluster names the same job; start-up refuses a task of another.
  EXPECT_EQ(c.job_identity,
            "TF_CONFIG cluster {\"chief\": [\"hostc:2222\"], \"worker\": [\"hosta:2222\", "
            "\"hostb:2222\", \"hosta:2223\"]}");
  EXPECT_EQ(w.job_identity, c.job_identity);
}

TEST(LaunchEnvTest, TfConfigKeepsTheSecret) {
  Env env = tf(kWorkers, "worker", 1);
  env["KOLO_RENDEZVOUS_SECRET"] = "abc";
  EXPECT_EQ(detect_launch_env(env).secret, "abc");
}

// ps and evaluator tasks, and the chief and workers of a cluster with ps tasks, are
// recognised and refused with the advice to use ParameterServerStrategy, but only after the
// whole spec is valid (an invalid spec gets the spec's error).
TEST(LaunchEnvTest, TfConfigPsClustersAreRefusedAfterValidation) {
  const std::string cluster =
      R"({"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1", "p:2"], "evaluator": ["e:1"]})";
  Status s = detect_error(tf(cluster, "ps", 1));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_CONTAINS(s.message(), "ps 1 (p:2)");
  EXPECT_CONTAINS(s.message(), "a ps task is not part of kolo::init()'s allreduce world");
  EXPECT_CONTAINS(s.message(), "kolo::train::ParameterServerStrategy");
  s = detect_error(tf(cluster, "evaluator", 0));
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_CONTAINS(s.message(), "evaluator 0 (e:1)");
  EXPECT_CONTAINS(s.message(), "kolo::train::ParameterServerStrategy");
  // An evaluator may be left out of the cluster (TensorFlow allows it): still refused.
  s = detect_error({{"TF_CONFIG", R"({"task": {"type": "evaluator", "index": 0}})"}});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  // The chief and the workers of a ps cluster: not an allreduce job either.
  for (const auto& [type, index, me] :
       {std::tuple<const char*, int, const char*>{"chief", 0, "chief 0 (c:1)"},
        {"worker", 0, "worker 0 (w:1)"}}) {
    s = detect_error(tf(cluster, type, index));
    EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << type;
    EXPECT_CONTAINS(s.message(), me);
    EXPECT_CONTAINS(s.message(), "its cluster has ps tasks (2)");
    EXPECT_CONTAINS(s.message(), "does not call kolo::init()");
  }
  // Without ps tasks a chief and workers (and an evaluator beside them) are an allreduce job.
  EXPECT_EQ(detect_launch_env(tf(R"({"chief": ["c:1"], "worker": ["w:1"]})", "worker", 0)).rank, 1);
  // The spec first: a ps index out of range is the spec's error.
  s = detect_error(tf(cluster, "ps", 2));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "exceeds the maximum index 1");
  s = detect_error(tf(R"({"chief": ["c:1", "c:2"], "ps": ["p:1"]})", "ps", 0));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "at most one 'chief'");
}

TEST(LaunchEnvTest, TfConfigErrorsReachTheCaller) {
  // Each case's message is tested in tf_config_test.cc; here: they are errors, not a
  // silent single process.
  for (const char* text :
       {"{", R"({"cluster": {"worker": ["a:1"]}})",
        R"({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}})",
        R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "master", "index": 0}})"}) {
    const Status s = detect_error({{"TF_CONFIG", text}});
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << text;
    EXPECT_CONTAINS(s.message(), "TF_CONFIG");
  }
}

// Without a cluster the task runs alone, as in TensorFlow.
TEST(LaunchEnvTest, TfConfigWithoutClusterIsASingleProcess) {
  expect_env(detect_launch_env({{"TF_CONFIG", "{}"}}), "none", 0, 1, 0, 1);
  expect_env(detect_launch_env({{"TF_CONFIG", ""}}), "none", 0, 1, 0, 1);
  expect_env(detect_launch_env(
                 {{"TF_CONFIG", R"({"cluster": {}, "task": {"type": "worker", "index": 0}})"}}),
             "none", 0, 1, 0, 1);
  EXPECT_FALSE(detect_launch_env({{"TF_CONFIG", "{}"}}).uses_store());
}

// --- torch.distributed's variables ---

const Env kTorch = {
    {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},    {"RANK", "3"},
    {"WORLD_SIZE", "8"},      {"LOCAL_RANK", "1"},         {"LOCAL_WORLD_SIZE", "2"},
    {"GROUP_RANK", "1"},      {"TORCHELASTIC_RUN_ID", "x"}};

TEST(LaunchEnvTest, TorchStyle) {
  const LaunchEnv e = detect_launch_env(kTorch);
  expect_env(e, "torch", 3, 8, 1, 2);
  EXPECT_TRUE(e.uses_store());
  EXPECT_FALSE(e.hosts_store);
  EXPECT_EQ(e.store_host, "node0");
  EXPECT_EQ(e.store_port, 29500);
  EXPECT_EQ(e.rank_name(0), "rank 0");
  EXPECT_EQ(e.job_identity, "TORCHELASTIC_RUN_ID=x");  // torchrun's id of the job
  Env no_id = kTorch;
  no_id.erase("TORCHELASTIC_RUN_ID");
  EXPECT_EQ(detect_launch_env(no_id).job_identity, "");  // nothing tells two jobs apart

  Env env = kTorch;
  env["RANK"] = "0";
  env["LOCAL_RANK"] = "0";
  const LaunchEnv r0 = detect_launch_env(env);
  EXPECT_TRUE(r0.hosts_store);  // rank 0 hosts the store at MASTER_PORT
  EXPECT_EQ(r0.store_bind, "0.0.0.0");
  env["MASTER_ADDR"] = "127.0.0.1";
  EXPECT_EQ(detect_launch_env(env).store_bind, "127.0.0.1");
  env["MASTER_ADDR"] = "::1";
  EXPECT_EQ(detect_launch_env(env).store_bind, "::1");

  // Without the local variables: local rank 0, every rank on this host (as for kolorun).
  expect_env(detect_launch_env(
                 {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}}),
             "torch", 1, 2, 0, 2);
  // A world of one needs no store.
  const LaunchEnv one = detect_launch_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  expect_env(one, "torch", 0, 1, 0, 1);
  EXPECT_FALSE(one.uses_store());
}

TEST(LaunchEnvTest, TorchStyleErrorsNameTheVariable) {
  struct Case {
    Env env;
    std::string want;
  };
  const Env master = {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}};
  const std::vector<Case> cases = {
      {merge({master, {{"RANK", "1"}}}), "RANK=1 is set but WORLD_SIZE is not"},
      {merge({master, {{"WORLD_SIZE", "2"}}}), "WORLD_SIZE=2 is set but RANK is not"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
       "MASTER_ADDR=h is set but MASTER_PORT is not"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}},
       "MASTER_PORT=1 is set but MASTER_ADDR is not"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR and MASTER_PORT are not"},
      {merge({master, {{"RANK", "x"}, {"WORLD_SIZE", "2"}}}), "RANK=x is not valid"},
      {merge({master, {{"RANK", "-1"}, {"WORLD_SIZE", "2"}}}), "RANK=-1 is not valid"},
      {merge({master, {{"RANK", "0"}, {"WORLD_SIZE", "0"}}}), "WORLD_SIZE=0 is not valid"},
      {merge({master, {{"RANK", "0"}, {"WORLD_SIZE", "2 "}}}), "WORLD_SIZE=2  is not valid"},
      {merge({master, {{"RANK", "2"}, {"WORLD_SIZE", "2"}}}),
       "RANK=2 is not valid with WORLD_SIZE=2: ranks are 0 to 1"},
      {merge({master, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "y"}}}),
       "LOCAL_RANK=y is not valid"},
      {merge(
           {master,
            {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}}),
       "LOCAL_RANK=2 and LOCAL_WORLD_SIZE=2 do not fit WORLD_SIZE=2"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
       "MASTER_PORT=70000 is not valid: expected a port from 1 to 65535"},
  };
  for (const Case& c : cases) {
    const Status s = detect_error(c.env);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << c.want;
    EXPECT_CONTAINS(s.message(), c.want);
  }
}

// --- Slurm ---

TEST(LaunchEnvTest, SlurmWithAStoreAddressIsAStoreJob) {
  const LaunchEnv mpi = detect_launch_env(kSlurm);
  EXPECT_FALSE(mpi.uses_store());  // as before: an MPI job
  EXPECT_EQ(auto_transport(mpi), "mpi");

  const LaunchEnv a = detect_launch_env(merge({kSlurm, {{"KOLO_RENDEZVOUS_ADDR", "n0:29400"}}}));
  expect_env(a, "slurm", 7, 12, 3, 4);
  EXPECT_TRUE(a.uses_store());
  EXPECT_FALSE(a.hosts_store);
  EXPECT_EQ(a.store_host, "n0");
  EXPECT_EQ(a.store_port, 29400);
  EXPECT_EQ(a.job_identity, "");
  EXPECT_EQ(detect_launch_env(merge({kSlurm,
                                     {{"KOLO_RENDEZVOUS_ADDR", "n0:29400"},
                                      {"SLURM_JOB_ID", "41"},
                                      {"SLURM_STEP_ID", "2"}}}))
                .job_identity,
            "SLURM_JOB_ID=41 SLURM_STEP_ID=2");

  const Env master = {{"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29500"}};
  const LaunchEnv m = detect_launch_env(merge({kSlurm, master}));
  EXPECT_EQ(m.store_host, "n1");
  EXPECT_EQ(m.store_port, 29500);
  // KOLO_RENDEZVOUS_ADDR wins over MASTER_ADDR/PORT.
  EXPECT_EQ(
      detect_launch_env(merge({kSlurm, master, {{"KOLO_RENDEZVOUS_ADDR", "n0:1"}}})).store_host,
      "n0");
  // Task 0 hosts it.
  const LaunchEnv t0 = detect_launch_env(
      merge({{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}}, master}));
  EXPECT_TRUE(t0.hosts_store);
  EXPECT_EQ(t0.store_bind, "0.0.0.0");
  EXPECT_EQ(auto_transport(t0), "gloo");
  // Half an address is an error, as for torch-style variables.
  const Status s = detect_error(merge({kSlurm, {{"MASTER_ADDR", "n1"}}}));
  EXPECT_CONTAINS(s.message(), "MASTER_ADDR=n1 is set but MASTER_PORT is not");
}

// --- precedence across the new launchers ---

TEST(LaunchEnvTest, PrecedenceWithStoreLaunchers) {
  const Env tf2 = tf(kWorkers, "worker", 1);
  // mpirun's variables win over TF_CONFIG, and an invalid TF_CONFIG is then not read.
  expect_env(detect_launch_env(merge({kOpenMpi, tf2})), "mpirun", 3, 6, 0, 3);
  expect_env(detect_launch_env(merge({kOpenMpi, {{"TF_CONFIG", "{"}}})), "mpirun", 3, 6, 0, 3);
  expect_env(detect_launch_env(merge({kPmi, tf2})), "pmi", 2, 4, 0, 2);
  expect_env(detect_launch_env(merge({kKolorun, tf2, kTorch})), "kolorun", 5, 8, 1, 4);
  // TF_CONFIG, then torch-style, then Slurm.
  expect_env(detect_launch_env(merge({tf2, kTorch, kSlurm})), "tf_config", 1, 3, 1, 2);
  expect_env(detect_launch_env(merge({kTorch, kSlurm})), "torch", 3, 8, 1, 2);
  // torch-style's errors are not masked by Slurm's variables.
  EXPECT_CONTAINS(detect_error(merge({kSlurm, {{"RANK", "1"}}})).message(), "WORLD_SIZE is not");
  // A TF_CONFIG without a cluster lets the next launcher's variables count.
  expect_env(detect_launch_env(merge({{{"TF_CONFIG", "{}"}}, kTorch})), "torch", 3, 8, 1, 2);
}

TEST(LaunchEnvTest, AutoTransport) {
  EXPECT_EQ(auto_transport(detect_launch_env({})), "local");
  EXPECT_EQ(auto_transport(detect_launch_env(kOpenMpi)), "mpi");
  EXPECT_EQ(auto_transport(detect_launch_env(kPmi)), "mpi");
  EXPECT_EQ(auto_transport(detect_launch_env(kKolorun)), "mpi");  // kolorun --mpi
  EXPECT_EQ(auto_transport(
                detect_launch_env(merge({kKolorun, {{"KOLO_RENDEZVOUS_ADDR", "127.0.0.1:5"}}}))),
            "gloo");
  EXPECT_EQ(auto_transport(detect_launch_env(tf(kWorkers, "worker", 0))), "gloo");
  EXPECT_EQ(auto_transport(detect_launch_env(kTorch)), "gloo");
  EXPECT_EQ(auto_transport(detect_launch_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}})), "local");
  EXPECT_EQ(auto_transport(detect_launch_env({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"}})), "local");
}

// An option that does not parse is an error here too (detect_launch_env reads the store's
// options through the registry).
TEST(LaunchEnvTest, BadOptionIsAnError) {
  const Status s = detect_error({{"KOLO_START_TIMEOUT_SECONDS", "soon"}});
  EXPECT_CONTAINS(s.message(), "KOLO_START_TIMEOUT_SECONDS=soon");
}

TEST(LaunchEnvTest, HostPort) {
  std::string host;
  int port = 0;
  EXPECT_TRUE(parse_host_port("a.b:1", &host, &port));
  EXPECT_EQ(host, "a.b");
  EXPECT_EQ(port, 1);
  EXPECT_TRUE(parse_host_port("[fe80::1]:65535", &host, &port));
  EXPECT_EQ(host, "fe80::1");
  EXPECT_EQ(port, 65535);
  for (const char* bad : {"", "a", "a:", ":1", "a:0", "a:65536", "a:1x", "a:+1", "a:-1", "::1",
                          "fe80::1:80", "[::1]", "[::1]:", "[]:1", "a:123456"}) {
    EXPECT_FALSE(parse_host_port(bad, &host, &port)) << bad;
  }
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("127.0.1.1"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("10.0.0.1"));
  EXPECT_FALSE(is_loopback_host("myhost"));
}

}  // namespace
// A world the store cannot start is refused at once, naming its variable and value: at
// 70000 the start-up once failed with the store's own "65536 keys" error, and at two
// billion it allocated until bad_alloc.
TEST(LaunchEnvTest, AWorldTooLargeToStartNamesItsVariable) {
  const Env master = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  for (const char* size : {"70000", "2000000000"}) {
    const Status s = detect_error(merge({master, {{"RANK", "1"}, {"WORLD_SIZE", size}}}));
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
    EXPECT_CONTAINS(s.message(), std::string("WORLD_SIZE=") + size +
                                     " is more processes than a kolo job can have (at most 65536");
  }
  Env big = kKolorun;
  big["KOLO_SIZE"] = "65537";
  EXPECT_CONTAINS(detect_error(big).message(), "KOLO_SIZE=65537 is more processes");
  Env slurm = kSlurm;
  slurm["SLURM_NTASKS"] = "100000";
  EXPECT_CONTAINS(detect_error(slurm).message(), "SLURM_NTASKS=100000 is more processes");
  const LaunchEnv most =
      detect_launch_env(merge({master, {{"RANK", "1"}, {"WORLD_SIZE", "65536"}}}));
  EXPECT_EQ(most.size, kMaxWorldSize);
}

}  // namespace kolo::core
