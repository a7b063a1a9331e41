// Threads: the default per-worker thread count and kolorun's line about it.
#include "launcher/threads.h"

#include <gtest/gtest.h>

namespace kolo::launcher {
namespace {

TEST(Threads, CoresSharedAmongTheWorkersOfAHost) {
  EXPECT_EQ(default_worker_threads(2, 2, {}), 1);
  EXPECT_EQ(default_worker_threads(16, 4, {}), 4);
  EXPECT_EQ(default_worker_threads(16, 3, {}), 5);  // rounded down
  EXPECT_EQ(default_worker_threads(8, 1, {}), 8);
}

TEST(Threads, AtLeastOneThread) {
  EXPECT_EQ(default_worker_threads(2, 8, {}), 1);  // more workers than cores
  EXPECT_EQ(default_worker_threads(0, 2, {}), 1);
  EXPECT_EQ(default_worker_threads(4, 0, {}), 4);
}

TEST(Threads, TheUsersChoiceWins) {
  EXPECT_EQ(default_worker_threads(16, 2, {{"OMP_NUM_THREADS", "3"}}), std::nullopt);
  EXPECT_EQ(default_worker_threads(16, 2, {{"OMP_NUM_THREADS", "1"}}), std::nullopt);
  // Empty counts as unset (as for OpenMP itself); other variables do not matter.
  EXPECT_EQ(default_worker_threads(16, 2, {{"OMP_NUM_THREADS", ""}}), 8);
  EXPECT_EQ(default_worker_threads(16, 2, {{"MKL_NUM_THREADS", "2"}}), 8);
}

TEST(Threads, WhatTheShimSets) {
  EXPECT_EQ(worker_threads_value(8, 2, {}), "4");
  EXPECT_EQ(worker_threads_value(8, 2, {{"OMP_NUM_THREADS", "3"}}), std::nullopt);
  // kolorun's value reaches other hosts; the host's own still wins.
  EXPECT_EQ(worker_threads_value(8, 2, {{"KOLO_OMP_NUM_THREADS", "6"}}), "6");
  EXPECT_EQ(worker_threads_value(8, 2, {{"KOLO_OMP_NUM_THREADS", "6"}, {"OMP_NUM_THREADS", "2"}}),
            std::nullopt);
  EXPECT_EQ(worker_threads_value(8, 2, {{"KOLO_OMP_NUM_THREADS", ""}}), "4");
}

TEST(Threads, NoticeSaysWhatEachWorkerGets) {
  EXPECT_EQ(threads_notice(2, 2, {}),
            "kolorun: OMP_NUM_THREADS is not set: each worker gets cores / workers on its host "
            "threads (1 here: 2 cores, 2 workers); set OMP_NUM_THREADS to choose");
  EXPECT_EQ(threads_notice(1, 1, {}),
            "kolorun: OMP_NUM_THREADS is not set: each worker gets cores / workers on its host "
            "threads (1 here: 1 core, 1 worker); set OMP_NUM_THREADS to choose");
  // No worker on this host: only the rule (other hosts count their own cores).
  EXPECT_EQ(threads_notice(8, 0, {}),
            "kolorun: OMP_NUM_THREADS is not set: each worker gets cores / workers on its host "
            "threads; set OMP_NUM_THREADS to choose");
  EXPECT_EQ(threads_notice(8, 2, {{"OMP_NUM_THREADS", "4"}}), "");
}

TEST(Threads, UsableCoresIsPositive) { EXPECT_GE(usable_cores(), 1); }

}  // namespace
}  // namespace kolo::launcher
