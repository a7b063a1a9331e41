// Multi-process tests of kolorun's parameter-server jobs (--ps, src/launcher/ps_plan.h,
// job.h): real kolorun, shell-script tasks (and launcher_worker.cc to read the job's
// store). Each task's TF_CONFIG is read back with parse_tf_config; the supervision rules
// (the chief's status, a failed worker that does not end the job, restarts, stopping the
// rest when the chief ends) are checked on real processes, and what is left in /proc.
//
// Each test bounds its run time (RunKolorun kills kolorun past its limit).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "launcher_test_util.h"
#include "run_kolorun.h"
#include "startup/tf_config.h"

namespace kolo::launcher::testing {
namespace {

// The pids printed as "[task] pid N" lines.
std::vector<pid_t> pids_in(const std::string& out) {
  std::vector<pid_t> pids;
  for (const auto& line : lines_of(out)) {
    const size_t at = line.find("] pid ");
    if (at != std::string::npos) pids.push_back(std::atoi(line.c_str() + at + 6));
  }
  return pids;
}

// Each "[type:index] TF_CONFIG" line of `out`, by its prefix.
std::map<std::string, core::TfConfig> tf_configs(const std::string& out) {
  std::map<std::string, core::TfConfig> by_task;
  for (const auto& line : lines_of(out)) {
    const size_t close = line.find("] ");
    if (line.empty() || line[0] != '[' || close == std::string::npos) continue;
    core::TfConfig c;
    const Status s = core::parse_tf_config(line.substr(close + 2), &c);
    EXPECT_TRUE(s.ok()) << line << ": " << s.to_string();
    by_task[line.substr(1, close - 1)] = c;
  }
  return by_task;
}

// The chief stays up a second so that every other task's line is printed before it ends
// the job (the chief's end stops the others at once).
const char* kPrintTfConfig =
    "echo \"$TF_CONFIG\"; if [ \"$KOLO_TASK_TYPE\" = chief ]; then sleep 1; fi";

TEST(PsLauncher, EachTaskGetsItsOwnTfConfigAndTheyAgreeOnTheCluster) {
  const RunResult r = run_kolorun({"--ps", "2", "-np", "2", "sh", "-c", kPrintTfConfig}, 30);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const auto by_task = tf_configs(r.out);
  ASSERT_EQ(by_task.size(), 5u) << r.out;
  const std::vector<std::pair<std::string, int>> want = {
      {"chief", 0}, {"worker", 0}, {"worker", 1}, {"ps", 0}, {"ps", 1}};
  const core::TfCluster& cluster = by_task.begin()->second.cluster;
  std::set<std::string> addresses;
  for (const auto& [type, index] : want) {
    const std::string label = type + ":" + std::to_string(index);
    ASSERT_EQ(by_task.count(label), 1u) << "no [" << label << "] line in:\n" << r.out;
    const core::TfConfig& c = by_task.at(label);
    EXPECT_EQ(c.task_type, type);
    EXPECT_EQ(c.task_index, index);
    EXPECT_EQ(c.cluster.chief, cluster.chief);
    EXPECT_EQ(c.cluster.worker, cluster.worker);
    EXPECT_EQ(c.cluster.ps, cluster.ps);
    EXPECT_TRUE(c.cluster.evaluator.empty());
  }
  EXPECT_EQ(cluster.chief.size(), 1u);
  EXPECT_EQ(cluster.worker.size(), 2u);
  EXPECT_EQ(cluster.ps.size(), 2u);
  for (const auto* job : {&cluster.chief, &cluster.worker, &cluster.ps}) {
    for (const auto& a : *job) {
      EXPECT_EQ(a.rfind("127.0.0.1:", 0), 0u) << a;
      addresses.insert(a);
    }
  }
  EXPECT_EQ(addresses.size(), 5u) << "every task has a port of its own";
  EXPECT_TRUE(core::validate_ps_cluster(cluster).ok());
}

TEST(PsLauncher, TheEvaluatorIsATaskOutsideTheCluster) {
  const RunResult r =
      run_kolorun({"--ps", "1", "-np", "1", "--evaluator", "sh", "-c", kPrintTfConfig}, 30);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const auto by_task = tf_configs(r.out);
  ASSERT_EQ(by_task.size(), 4u) << r.out;
  ASSERT_EQ(by_task.count("evaluator:0"), 1u) << r.out;
  const core::TfConfig& e = by_task.at("evaluator:0");
  EXPECT_EQ(e.task_type, "evaluator");
  EXPECT_TRUE(e.cluster.evaluator.empty());
  EXPECT_EQ(e.cluster.ps, by_task.at("chief:0").cluster.ps);
  EXPECT_EQ(e.cluster.worker.size(), 1u);
}

TEST(PsLauncher, OutputIsPrefixedWithTheTaskAndVariablesAreSet) {
  const RunResult r =
      run_kolorun({"--ps", "1", "-np", "2", "sh", "-c",
                   "echo \"type=$KOLO_TASK_TYPE index=$KOLO_TASK_INDEX rank=${KOLO_RANK-unset} "
                   "store=${KOLO_RENDEZVOUS_ADDR%:*} secret=${#KOLO_RENDEZVOUS_SECRET}\"; "
                   "echo err >&2; if [ \"$KOLO_TASK_TYPE\" = chief ]; then sleep 1; fi"},
                  30, {{"KOLO_RANK", "7"}, {"KOLO_SIZE", "8"}});  // an outer job's: not passed on
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (const char* line : {"[chief:0] type=chief index=0", "[worker:0] type=worker index=0",
                           "[worker:1] type=worker index=1", "[ps:0] type=ps index=0"}) {
    EXPECT_TRUE(contains(r.out, std::string(line) + " rank=unset store=127.0.0.1 secret=32\n"))
        << line << " in:\n"
        << r.out;
  }
  EXPECT_EQ(count(r.err, "] err\n"), 4) << r.err;
  EXPECT_TRUE(contains(r.err, "[ps:0] err\n")) << r.err;
}

// An outer job's rank variables in kolorun's environment: each worker of an allreduce job
// gets its own, once (a C program's getenv would return the first of two entries; `env`
// lists every entry).
TEST(PsLauncher, AnOuterJobsRankIsReplacedInAnAllreduceJob) {
  // `env` itself, not through sh (which would pass on its own copy, one entry per name).
  const RunResult r =
      run_kolorun({"-np", "2", "env"}, 30, {{"KOLO_RANK", "7"}, {"KOLO_SIZE", "8"}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "] KOLO_RANK="), 2) << r.out;
  EXPECT_TRUE(contains(r.out, "[0] KOLO_RANK=0\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[1] KOLO_RANK=1\n")) << r.out;
}

TEST(PsLauncher, TheChiefsEndStopsTheOthersAndGivesTheJobsStatus) {
  KolorunProcess p({"--ps", "2", "-np", "1", "--evaluator", "sh", "-c",
                    "echo pid $$; if [ \"$KOLO_TASK_TYPE\" = chief ]; then sleep 1; "
                    "echo bye; exit 3; fi; exec sleep 60"});
  const RunResult r = p.wait(30);
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_LT(r.seconds, 10) << "stopped at once, not after the others' 60 s";
  const auto pids = pids_in(r.out);
  EXPECT_EQ(pids.size(), 5u) << r.out;
  EXPECT_TRUE(gone_within(pids, 2)) << "a task outlived the job";
  EXPECT_TRUE(contains(r.err, "kolorun: chief 0 (host localhost) exited with status 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun:   [chief:0] bye")) << r.err;
  EXPECT_TRUE(contains(r.err, "the chief ended: stopping the other tasks")) << r.err;
  // The tasks it stopped are not named as failures.
  EXPECT_FALSE(contains(r.err, "ps 0 (host")) << r.err;
}

TEST(PsLauncher, AChiefThatSucceedsEndsTheJobWithStatusZero) {
  const RunResult r = run_kolorun({"--ps", "1", "-np", "1", "sh", "-c",
                                   "if [ \"$KOLO_TASK_TYPE\" = chief ]; then sleep 0.5; exit 0; "
                                   "fi; exec sleep 60"},
                                  30);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_LT(r.seconds, 10);
}

TEST(PsLauncher, AKilledWorkerDoesNotStopTheJobAndItsEndIsInTheStore) {
  // The chief reads the worker's end from the job's store under both keys, then ends.
  const std::string script =
      "case $KOLO_TASK_TYPE in "
      "chief) exec " KOLO_LAUNCHER_WORKER
      " get launcher/task_exit/worker:1 launcher/exit/2;; "
      "worker) if [ $KOLO_TASK_INDEX = 1 ]; then echo dying; kill -9 $$; fi; exec sleep 60;; "
      "*) exec sleep 60;; esac";
  const RunResult r = run_kolorun({"--ps", "1", "-np", "2", "sh", "-c", script}, 30);
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  const std::string sentence = "worker 1 (host localhost) was killed by signal 9 (SIGKILL)";
  EXPECT_TRUE(contains(r.out, "[chief:0] launcher/task_exit/worker:1 = " + sentence)) << r.out;
  EXPECT_TRUE(contains(r.out, "[chief:0] launcher/exit/2 = " + sentence)) << r.out;
  EXPECT_TRUE(contains(r.err, "kolorun: " + sentence + "\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun:   [worker:1] dying")) << r.err;
  EXPECT_FALSE(contains(r.err, "restarting")) << r.err;
}

TEST(PsLauncher, MaxRestartsRestartsAFailedWorkerWithTheSameTfConfig) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string d = dir.path();
  // worker 0 dies on each run, after saving its TF_CONFIG; the chief waits for two runs.
  const std::string script =
      "case $KOLO_TASK_TYPE in "
      "chief) for i in $(seq 200); do [ $(cat " +
      d +
      "/runs 2>/dev/null | wc -l) -ge 2 ] && "
      "{ sleep 0.5; exit 0; }; sleep 0.05; done; exit 4;; "
      "worker) echo run >> " +
      d + "/runs; echo \"$TF_CONFIG\" >> " + d +
      "/tf; "
      "exit 7;; *) exec sleep 60;; esac";
  const RunResult r =
      run_kolorun({"--ps", "1", "-np", "1", "--max-restarts", "1", "sh", "-c", script}, 30);
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(count(r.err, "kolorun: worker 0 (host localhost) exited with status 7\n"), 2) << r.err;
  EXPECT_EQ(count(r.err,
                  "kolorun: restarting worker 0 with the same TF_CONFIG (restart 1 of "
                  "--max-restarts 1)"),
            1)
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "not restarting worker 0: it was restarted 1 time already "
                       "(--max-restarts 1)"))
      << r.err;
  const auto tf = lines_of(dir.read("tf"));
  ASSERT_EQ(tf.size(), 2u) << dir.read("tf");
  EXPECT_EQ(tf[0], tf[1]);
  core::TfConfig c;
  ASSERT_TRUE(core::parse_tf_config(tf[1], &c).ok()) << tf[1];
  EXPECT_EQ(c.task_type, "worker");
  EXPECT_EQ(lines_of(dir.read("runs")).size(), 2u) << "one restart in all";
}

TEST(PsLauncher, AFailedPsIsNamedAndTheJobGoesOnUntilTheChiefEnds) {
  const RunResult r =
      run_kolorun({"--ps", "2", "-np", "1", "--max-restarts", "3", "sh", "-c",
                   "case $KOLO_TASK_TYPE in chief) sleep 1.5; exit 5;; "
                   "ps) if [ $KOLO_TASK_INDEX = 1 ]; then exit 9; fi; exec sleep 60;; "
                   "*) exec sleep 60;; esac"},
                  30);
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.status, 5) << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: ps 1 (host localhost) exited with status 9\n")) << r.err;
  EXPECT_FALSE(contains(r.err, "restarting ps")) << "only workers are restarted:\n" << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: chief 0 (host localhost) exited with status 5")) << r.err;
}

TEST(PsLauncher, SigintStopsEveryTask) {
  KolorunProcess p({"--ps", "1", "-np", "2", "sh", "-c", "echo pid $$; exec sleep 60"});
  ASSERT_TRUE(p.wait_for_lines("] pid ", 4, 10)) << p.out();
  ::kill(p.pid(), SIGINT);
  const RunResult r = p.wait(15);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_TRUE(gone_within(pids_in(r.out), 2));
}

TEST(PsLauncher, AKilledKolorunLeavesNoTaskRunning) {
  KolorunProcess p({"--ps", "1", "-np", "1", "sh", "-c", "echo pid $$; exec sleep 60"});
  ASSERT_TRUE(p.wait_for_lines("] pid ", 3, 10)) << p.out();
  const auto pids = pids_in(p.out());
  ::kill(p.pid(), SIGKILL);
  p.wait(5);
  EXPECT_TRUE(gone_within(pids, 5)) << "a task outlived kolorun";
}

// Other hosts through a stand-in ssh first on PATH (as own_launcher_test.cc does): it skips
// its options up to "--", then the host, and runs the command here with sh.
TEST(PsLauncher, TasksOnOtherHostsGetTheirHostsNameAndPortsFromTheBase) {
  ScratchDir dir;
  dir.write("ssh",
            "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nshift\nexec sh -c \"$1\"\n",
            0755);
  const char* path = std::getenv("PATH");
  const std::map<std::string, std::string> env = {
      {"PATH", dir.path() + ":" + (path ? path : "/usr/bin:/bin")}};
  // chief and worker 0 here; worker 1, ps 0 and ps 1 on hostb. Worker 1 is killed on its
  // first run and restarted there (through ssh and the remote wrapper again).
  const std::string d = dir.path();
  const std::string script =
      "echo \"$TF_CONFIG\"; case $KOLO_TASK_TYPE in "
      "chief) for i in $(seq 200); do [ -e " +
      d +
      "/second ] && { sleep 0.5; exit 0; }; "
      "sleep 0.05; done; exit 4;; "
      "worker) if [ $KOLO_TASK_INDEX = 1 ]; then if [ -e " +
      d + "/first ]; then touch " + d + "/second; else touch " + d +
      "/first; kill -9 $$; fi; fi; exec sleep 60;; "
      "*) exec sleep 60;; esac";
  const RunResult r =
      run_kolorun({"-H", "localhost:2,hostb:3", "--rendezvous-addr", "127.0.0.1", "--ps", "2",
                   "-np", "2", "--max-restarts", "1", "sh", "-c", script},
                  30, env);
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "kolorun: worker 1 (host hostb) was killed by signal 9 (SIGKILL)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "restarting worker 1 with the same TF_CONFIG")) << r.err;
  EXPECT_FALSE(contains(r.err, "KOLO_LAUNCHER_EVENT")) << r.err;
  const auto by_task = tf_configs(r.out);
  ASSERT_EQ(by_task.count("ps:1"), 1u) << r.out;
  const core::TfCluster& c = by_task.at("ps:1").cluster;
  ASSERT_EQ(c.worker.size(), 2u);
  ASSERT_EQ(c.ps.size(), 2u);
  EXPECT_EQ(c.chief[0].rfind("127.0.0.1:", 0), 0u) << c.chief[0];
  EXPECT_EQ(c.worker[0].rfind("127.0.0.1:", 0), 0u) << c.worker[0];
  // hostb's tasks in rank order: base, base + 1, base + 2.
  ASSERT_EQ(c.worker[1].rfind("hostb:", 0), 0u) << c.worker[1];
  const int base = std::atoi(c.worker[1].c_str() + 6);
  EXPECT_GE(base, 20000);
  EXPECT_LT(base, 30000);
  EXPECT_EQ(c.ps[0], "hostb:" + std::to_string(base + 1));
  EXPECT_EQ(c.ps[1], "hostb:" + std::to_string(base + 2));
  for (const auto& [label, config] : by_task) {
    EXPECT_EQ(config.cluster.ps, c.ps) << label;
    EXPECT_EQ(config.cluster.worker, c.worker) << label;
  }
}

TEST(PsLauncher, CommandLineErrors) {
  struct Case {
    std::vector<std::string> args;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {{"--ps", "0", "-np", "2", "true"}, "kolorun: --ps 0: There must be at least one ps."},
           {{"--ps", "2", "true"}, "There must be at least one worker."},
           {{"--ps", "1", "-np", "0", "true"}, "There must be at least one worker."},
           {{"--ps", "2", "-np", "2", "-H", "localhost:3", "true"},
            "a parameter-server job of 1 chief, 2 workers and 2 ps tasks needs 5 slots but -H "
            "localhost:3 has 3"},
           {{"-np", "1", "--evaluator", "true"}, "--evaluator belongs to a parameter-server job"},
           {{"-np", "1", "--max-restarts", "2", "true"},
            "--max-restarts belongs to a parameter-server job"},
           {{"--ps", "1", "-np", "1", "--mpi", "true"},
            "--ps runs through kolorun's own launcher, not --mpi"},
           {{"--ps", "1", "-np", "1", "--max-restarts", "-1", "true"},
            "--max-restarts -1 is not valid"},
           {{"true"}, "-np N is required"},
       }) {
    const RunResult r = run_kolorun(c.args, 15);
    EXPECT_EQ(r.status, 2) << c.want << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.want)) << "want: " << c.want << "\ngot: " << r.err;
  }
}

TEST(PsLauncher, DryRunPrintsEachTasksCommand) {
  const RunResult r = run_kolorun({"--dry-run", "--ps", "1", "-np", "1", "./train"}, 15);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].rfind("[chief:0] localhost: env ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[2].rfind("[ps:0] localhost: env ", 0), 0u) << lines[2];
  EXPECT_TRUE(contains(lines[2], "KOLO_TASK_TYPE=ps")) << lines[2];
  EXPECT_TRUE(contains(lines[2], "TF_CONFIG=")) << lines[2];
  EXPECT_FALSE(contains(r.out, "KOLO_RENDEZVOUS_SECRET")) << r.out;
}

}  // namespace
}  // namespace kolo::launcher::testing
