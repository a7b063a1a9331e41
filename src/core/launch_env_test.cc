// detect_launch_env (core/launch_env.h): each launcher's variables and their precedence.
#include "core/launch_env.h"

#include <gtest/gtest.h>

#include <initializer_list>

namespace kolo::core {
namespace {

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

}  // namespace
}  // namespace kolo::core
