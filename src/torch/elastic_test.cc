// elastic::run's loop with an injected reset step (what happens after a worker left, after
// workers were added at a commit, after this worker was removed, after a failed re-forming),
// State's commit count and sync's choice of root. One process: kolo runs as a job of one,
// started once for this program (its sync is real, over one rank).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kolo/elastic.h"

namespace kolo::elastic {
namespace {

class KoloJob : public ::testing::Environment {
 public:
  void SetUp() override { kolo::init(); }
  void TearDown() override { kolo::shutdown(); }
};
const auto* const kJob = ::testing::AddGlobalTestEnvironment(new KoloJob);

// A state of one number that counts what run() does with it.
class Counter : public State {
 public:
  int value = 0;
  int saved = 0;
  int saves = 0, restores = 0, syncs = 0;
  int fail_syncs = 0;  // the next syncs that throw WorkersChanged (a worker died in them)

 protected:
  void save_state() override {
    saved = value;
    ++saves;
  }
  void restore_state() override {
    value = saved;
    ++restores;
  }
  void sync_from(int root) override {
    EXPECT_EQ(root, 0);
    ++syncs;
    if (fail_syncs > 0) {
      --fail_syncs;
      throw WorkersChanged("rank 1 (host b) was killed by signal 9 (SIGKILL) during the sync");
    }
    saved = value;
  }
};

// A reset step that answers from a script: true/false, or "throw" for a generation that
// failed to form.
struct Resets {
  std::vector<std::string> script;
  int calls = 0;
  bool operator()() {
    const std::string next = script.at(calls++);
    if (next == "throw") throw WorkersChanged("rank 2 left while the next generation formed");
    return next == "true";
  }
};

TEST(ElasticRunTest, AWorkerLeavesRestoresTheCommitAndRunsTrainAgain) {
  Counter state;
  int callbacks = 0;
  state.register_reset_callbacks({[&] { ++callbacks; }});
  Resets resets{{"true"}};
  std::vector<int> seen;  // state.value at each entry of train
  const bool done = detail::run(
      state,
      [&](State& s) {
        EXPECT_EQ(&s, &state);
        seen.push_back(state.value);
        state.value = 5;
        state.commit();
        state.value = 9;  // not committed
        if (seen.size() == 1) throw WorkersChanged("rank 1 (host b) exited with status 1");
      },
      std::ref(resets));
  EXPECT_TRUE(done);
  EXPECT_EQ(seen, (std::vector<int>{0, 5}));  // the second run starts from the commit
  EXPECT_EQ(state.restores, 1);
  EXPECT_EQ(callbacks, 1);
  EXPECT_EQ(resets.calls, 1);
  EXPECT_EQ(state.syncs, 2);  // before each run of train
  EXPECT_EQ(state.commits(), 2);
}

TEST(ElasticRunTest, HostsUpdatedAtACommitResetsWithoutRestoring) {
  Counter state;
  int callbacks = 0;
  state.register_reset_callbacks({[&] { ++callbacks; }, [&] { callbacks += 10; }});
  Resets resets{{"true"}};
  int runs = 0;
  EXPECT_TRUE(detail::run(
      state,
      [&](State&) {
        if (++runs == 1) {
          state.value = 7;
          state.save();
          EXPECT_EQ(state.commits(), 1) << "a save is a commit";
          state.value = 8;  // e.g. the interrupt came from the user's own check
          throw HostsUpdatedInterrupt();
        }
        EXPECT_EQ(state.value, 8);  // kept: no restore
      },
      std::ref(resets)));
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(state.restores, 0);
  EXPECT_EQ(callbacks, 11);  // both callbacks, once
  EXPECT_EQ(state.syncs, 2);
}

TEST(ElasticRunTest, ARemovedWorkerReturnsFalse) {
  Counter state;
  int callbacks = 0, runs = 0;
  state.register_reset_callbacks({[&] { ++callbacks; }});
  Resets resets{{"false"}};
  EXPECT_FALSE(detail::run(
      state,
      [&](State&) {
        ++runs;
        throw HostsUpdatedInterrupt();
      },
      std::ref(resets)));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(callbacks, 0);
}

TEST(ElasticRunTest, AFailedReFormingResetsAgain) {
  Counter state;
  int callbacks = 0, runs = 0;
  state.register_reset_callbacks({[&] { ++callbacks; }});
  Resets resets{{"throw", "throw", "true"}};
  EXPECT_TRUE(detail::run(
      state,
      [&](State&) {
        if (++runs == 1) throw WorkersChanged("rank 0 (host a) was killed by signal 9");
      },
      std::ref(resets)));
  EXPECT_EQ(resets.calls, 3);
  EXPECT_EQ(state.restores, 1);  // once for the failure, not per attempt
  EXPECT_EQ(callbacks, 1);
  EXPECT_EQ(runs, 2);
}

TEST(ElasticRunTest, AWorkerLostDuringSyncRestoresAndSyncsAgain) {
  Counter state;
  state.fail_syncs = 1;
  Resets resets{{"true"}};
  int runs = 0;
  EXPECT_TRUE(detail::run(
      state, [&](State&) { ++runs; }, std::ref(resets)));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(state.syncs, 2);
  EXPECT_EQ(state.restores, 1);
}

TEST(ElasticRunTest, OtherErrorsPropagate) {
  Counter state;
  Resets resets{{}};
  try {
    detail::run(
        state, [](State&) { throw Error(ErrorCode::kMismatch, "grad.w: float32 on rank 0, ..."); },
        std::ref(resets));
    ADD_FAILURE() << "no error";
  } catch (const WorkersChanged&) {
    ADD_FAILURE() << "a mismatch is not a change of workers";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
  }
  EXPECT_THROW(detail::run(
                   state, [](State&) { throw std::runtime_error("user bug"); }, std::ref(resets)),
               std::runtime_error);
  EXPECT_EQ(resets.calls, 0);
  EXPECT_EQ(state.restores, 0);
}

TEST(ElasticRunTest, OutsideAnElasticJobRunSyncsAndTrainsOnce) {
  ASSERT_FALSE(kolo::elastic::enabled());
  Counter state;
  int runs = 0;
  EXPECT_TRUE(run(state, [&](State&) { ++runs; }));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(state.syncs, 1);
  // Nothing to reset to: the failure reaches the caller.
  EXPECT_THROW(run(state, [](State&) { throw WorkersChanged("rank 1 left"); }), WorkersChanged);
}

TEST(ElasticStateTest, CommitsCountAndSurviveRestoreAndSync) {
  Counter state;
  EXPECT_EQ(state.commits(), 0);
  state.commit();  // not elastic: no host update, no interrupt
  state.commit();
  EXPECT_EQ(state.saves, 2);
  EXPECT_EQ(state.commits(), 2);
  state.restore();
  EXPECT_EQ(state.commits(), 2);
  state.sync();  // one rank: its own age
  EXPECT_EQ(state.commits(), 2);
  EXPECT_FALSE(HostsUpdatedInterrupt().skip_sync());
  EXPECT_NE(std::string(HostsUpdatedInterrupt().what()).find("run()"), std::string::npos);
}

TEST(ElasticStateTest, SyncRootIsTheLowestRankWithTheMostCommits) {
  EXPECT_EQ(detail::choose_sync_root({0}), 0);
  EXPECT_EQ(detail::choose_sync_root({0, 0, 0}), 0);     // a fresh job: rank 0
  EXPECT_EQ(detail::choose_sync_root({0, 3, 3, 1}), 1);  // newcomer at rank 0 loses
  EXPECT_EQ(detail::choose_sync_root({4, 5, 0}), 1);     // a commit finished on rank 1 only
  EXPECT_EQ(detail::choose_sync_root({2, 0, 0, 7}), 3);
  EXPECT_THROW(detail::choose_sync_root({}), Error);
}

}  // namespace
}  // namespace kolo::elastic
