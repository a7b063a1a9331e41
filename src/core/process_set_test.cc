// Process sets over the inproc transport: sets of ranks running collectives among
// themselves, concurrently with each other and with the global set, each with its own
// negotiation; their registration, removal, and every error case (which every rank must
// see alike). Real processes over MPI: tests/multiprocess (mp_worker process_sets).
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/testing/ranks.h"

namespace kolo::core {
namespace {

using testing::run_ranks;
using testing::test_config;
using testing::view_of;

// Runs `f`, expecting kolo::Error with `code` and a message containing every part.
template <typename F>
void expect_error(F&& f, ErrorCode code, const std::vector<std::string>& parts, int rank) {
  try {
    f();
    ADD_FAILURE() << "rank " << rank << ": no error, expected one mentioning '" << parts[0] << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "rank " << rank << ": " << e.what();
    for (const auto& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "rank " << rank << ": '" << part << "' not in: " << e.what();
    }
  }
}

Handle allreduce(Runtime& rt, std::vector<float>& v, int set, const std::string& name = "",
                 ReduceOp op = ReduceOp::kSum) {
  AllreduceOptions o;
  o.name = name;
  o.op = op;
  o.process_set = set;
  return ops::allreduce(rt, {view_of(v, DataType::kFloat32)}, {view_of(v, DataType::kFloat32)}, o,
                        false);
}

// Sum of (r + 1) * scale over the job's ranks `ranks`.
float sum_over(const std::vector<int>& ranks, float scale) {
  float s = 0;
  for (int r : ranks) s += (r + 1) * scale;
  return s;
}

// Every collective on `set` (this rank a member), results against references.
void check_collectives(Runtime& rt, const ProcessSet& set, int rank, int rounds) {
  const int n = set.size(), me = set.rank();
  const std::vector<int>& ranks = set.ranks();
  for (int round = 0; round < rounds; ++round) {
    const std::string tag = "s" + std::to_string(set.id()) + "." + std::to_string(round) + ".";
    std::vector<float> sum(7, rank + 1.0f), avg(3, rank + 1.0f), unnamed(2, rank + 1.0f);
    Handle hs = allreduce(rt, sum, set.id(), tag + "sum");
    Handle ha = allreduce(rt, avg, set.id(), tag + "avg", ReduceOp::kAverage);
    Handle hu = allreduce(rt, unnamed, set.id());  // "allreduce.set<k>.noname.<n>"
    // allgather: rank r of the set sends r + 1 rows of its job rank.
    std::vector<std::int32_t> rows(static_cast<std::size_t>(me + 1), rank);
    AllgatherOptions go{.name = tag + "gather", .process_set = set.id()};
    Handle hg = ops::allgather(rt, view_of(rows, DataType::kInt32), go);
    // broadcast from the set's last member: the root is a rank of the job (Horovod's rule).
    std::vector<double> b(4, rank);
    BroadcastOptions bo{.name = tag + "bcast", .root = ranks.back(), .process_set = set.id()};
    Handle hb = ops::broadcast(rt, view_of(b, DataType::kFloat64), bo);
    // alltoall: one row to each member, holding the sender's job rank.
    std::vector<std::int64_t> a2a(static_cast<std::size_t>(n), rank);
    AlltoallOptions ao{.name = tag + "a2a", .process_set = set.id()};
    Handle hx = ops::alltoall(rt, view_of(a2a, DataType::kInt64), ao);
    std::vector<float> rs(static_cast<std::size_t>(2 * n), rank + 1.0f);
    ReducescatterOptions ro{.name = tag + "rs", .op = ReduceOp::kSum, .process_set = set.id()};
    Handle hr = ops::reducescatter(rt, view_of(rs, DataType::kFloat32), ro);
    for (Handle* h : {&hs, &ha, &hu, &hg, &hb, &hx, &hr}) h->wait();
    for (float x : sum) ASSERT_EQ(x, sum_over(ranks, 1)) << "rank " << rank;
    for (float x : avg) ASSERT_FLOAT_EQ(x, sum_over(ranks, 1) / n) << "divides by the set's size";
    for (float x : unnamed) ASSERT_EQ(x, sum_over(ranks, 1));
    std::vector<std::int32_t> gathered;
    for (int i = 0; i < n; ++i) gathered.insert(gathered.end(), i + 1, ranks[i]);
    const Tensor& g = hg.output();
    ASSERT_EQ(g.numel(), static_cast<std::int64_t>(gathered.size()));
    EXPECT_TRUE(std::equal(gathered.begin(), gathered.end(), g.data_as<std::int32_t>()));
    for (double x : b) ASSERT_EQ(x, ranks.back());
    const Tensor& x = hx.output();
    ASSERT_EQ(x.numel(), n);
    for (int i = 0; i < n; ++i) EXPECT_EQ(x.data_as<std::int64_t>()[i], ranks[i]);
    const Tensor& r = hr.output();
    ASSERT_EQ(r.numel(), 2);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(r.data_as<float>()[i], sum_over(ranks, 1));
    ops::barrier(rt, {.process_set = set.id()}).wait();
  }
}

TEST(ProcessSetTest, GlobalSetDescribesTheJob) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    const ProcessSet g = ops::global_process_set(rt);
    EXPECT_EQ(g.id(), kGlobalProcessSet);
    EXPECT_EQ(g.ranks(), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(g.rank(), rank);
    EXPECT_TRUE(g.included());
  });
}

TEST(ProcessSetTest, TwoDisjointSetsRunConcurrently) {
  run_ranks(4, test_config(), [](int rank, Runtime& rt) {
    // Ranks in any order: they are sorted.
    const ProcessSet low = ops::add_process_set(rt, {1, 0});
    const ProcessSet high = ops::add_process_set(rt, {2, 3});
    EXPECT_EQ(low.id(), 1);
    EXPECT_EQ(high.id(), 2);
    EXPECT_EQ(low.ranks(), (std::vector<int>{0, 1}));
    EXPECT_EQ(low.included(), rank < 2);
    EXPECT_EQ(low.rank(), rank < 2 ? rank : -1);
    EXPECT_EQ(high.rank(), rank >= 2 ? rank - 2 : -1);
    EXPECT_EQ(high.size(), 2);
    check_collectives(rt, rank < 2 ? low : high, rank, 3);
    // The same names in both sets (different ranks) do not meet.
    std::vector<float> v(5, rank + 1.0f);
    allreduce(rt, v, rank < 2 ? low.id() : high.id(), "same.name").wait();
    for (float x : v) EXPECT_EQ(x, rank < 2 ? 3.0f : 7.0f);
    ops::remove_process_set(rt, low);
    ops::remove_process_set(rt, high);
  });
}

TEST(ProcessSetTest, ASetAndTheGlobalSetInterleave) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    const ProcessSet ends = ops::add_process_set(rt, {0, 2});
    for (int step = 0; step < 20; ++step) {
      const std::string tag = std::to_string(step);
      std::vector<float> all(4, rank + 1.0f), some(4, rank + 1.0f);
      Handle global = allreduce(rt, all, kGlobalProcessSet, "global." + tag);
      Handle set;
      if (ends.included()) set = allreduce(rt, some, ends.id(), "set." + tag);
      global.wait();
      for (float x : all) ASSERT_EQ(x, 6.0f);
      if (set.valid()) {
        set.wait();
        for (float x : some) ASSERT_EQ(x, 4.0f);
      }
    }
    // The set's steady state takes its own response cache's fast path.
    ops::barrier(rt, {}).wait();
  });
}

TEST(ProcessSetTest, ARankInTwoOverlappingSets) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    const ProcessSet a = ops::add_process_set(rt, {0, 1});
    const ProcessSet b = ops::add_process_set(rt, {1, 2});
    for (int step = 0; step < 10; ++step) {
      const std::string tag = std::to_string(step);
      std::vector<float> va(3, rank + 1.0f), vb(3, rank + 1.0f);
      Handle ha, hb;
      // Rank 1 submits b's first, so both are in flight at once in either order.
      if (b.included()) hb = allreduce(rt, vb, b.id(), "b." + tag);
      if (a.included()) ha = allreduce(rt, va, a.id(), "a." + tag);
      if (ha.valid()) {
        ha.wait();
        for (float x : va) ASSERT_EQ(x, 3.0f);
      }
      if (hb.valid()) {
        hb.wait();
        for (float x : vb) ASSERT_EQ(x, 5.0f);
      }
    }
    // Rank 1 runs every collective on a, then on b; rank 2 waits for it in b meanwhile.
    if (a.included()) check_collectives(rt, a, rank, 1);
    if (b.included()) check_collectives(rt, b, rank, 1);
    ops::barrier(rt, {}).wait();  // rank 0 stays until rank 2 is done
  });
}

TEST(ProcessSetTest, ANonMemberIsRefusedAtOnce) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    const ProcessSet set = ops::add_process_set(rt, {0, 1});
    if (rank == 2) {
      std::vector<float> v(2, 1.0f);
      expect_error([&] { allreduce(rt, v, set.id(), "x"); }, ErrorCode::kInvalidArgument,
                   {"allreduce 'x'", "rank 2 is not a member of process set 1 (ranks 0, 1)"}, rank);
      expect_error([&] { ops::barrier(rt, {.process_set = set.id()}); },
                   ErrorCode::kInvalidArgument, {"not a member of process set 1"}, rank);
    }
    std::vector<float> v(2, 1.0f);
    expect_error([&] { allreduce(rt, v, 7, "y"); }, ErrorCode::kInvalidArgument,
                 {"process set 7 does not exist"}, rank);
    expect_error([&] { allreduce(rt, v, -1, "z"); }, ErrorCode::kInvalidArgument,
                 {"process set -1 does not exist"}, rank);
    // No rank shuts down before every rank made its checks: a rank that is late (TSan)
    // would otherwise be told that the others shut down instead of its own error.
    ops::barrier(rt, {}).wait();
  });
}

TEST(ProcessSetTest, DifferentRanksOnDifferentRanksFailEverywhere) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    const std::vector<int> mine = rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2};
    expect_error([&] { ops::add_process_set(rt, mine); }, ErrorCode::kMismatch,
                 {"Mismatched ranks for add_process_set", "[0, 1] on rank 0; [0, 2] on ranks 1, 2",
                  "same order"},
                 rank);
    // Nothing was registered; the next call gets id 1.
    EXPECT_EQ(ops::add_process_set(rt, {0, 1}).id(), 1);
  });
}

TEST(ProcessSetTest, InvalidRankListsFailEverywhere) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    expect_error([&] { ops::add_process_set(rt, {}); }, ErrorCode::kInvalidArgument,
                 {"needs at least one rank"}, rank);
    expect_error(
        [&] {
          ops::add_process_set(rt, {0, 3});
        },
        ErrorCode::kInvalidArgument, {"names rank 3, but the job has 3 ranks (0 to 2)"}, rank);
    expect_error(
        [&] {
          ops::add_process_set(rt, {-1, 0});
        },
        ErrorCode::kInvalidArgument, {"names rank -1"}, rank);
    expect_error(
        [&] {
          ops::add_process_set(rt, {1, 0, 1});
        },
        ErrorCode::kInvalidArgument, {"process set [0, 1, 1] names rank 1 twice"}, rank);
    const ProcessSet set = ops::add_process_set(rt, {2, 1});
    expect_error(
        [&] {
          ops::add_process_set(rt, {1, 2});
        },
        ErrorCode::kInvalidArgument,
        {"process set " + std::to_string(set.id()) + " already has ranks 1, 2"}, rank);
    // A set of one rank is a set like others; the set of every rank is the global set.
    const ProcessSet one = ops::add_process_set(rt, {1});
    expect_error(
        [&] {
          ops::add_process_set(rt, {2, 0, 1});
        },
        ErrorCode::kInvalidArgument,
        {"ranks 0, 1, 2 are every rank of the job", "duplicate of the global process set"}, rank);
    std::vector<float> v(3, rank + 1.0f);
    if (rank == 1) {
      allreduce(rt, v, one.id(), "alone").wait();
      for (float x : v) EXPECT_EQ(x, 2.0f);
    }
    // The refusal left no trace: the next set gets the next id.
    EXPECT_EQ(ops::add_process_set(rt, {0, 2}).id(), one.id() + 1);
  });
}

TEST(ProcessSetTest, RemovalErrorsAndReuse) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    const ProcessSet global = ops::global_process_set(rt);
    expect_error([&] { ops::remove_process_set(rt, global); }, ErrorCode::kInvalidArgument,
                 {"the global process set (id 0) cannot be removed"}, rank);
    expect_error([&] { ops::remove_process_set(rt, ProcessSet(9, {0}, 0)); },
                 ErrorCode::kInvalidArgument, {"process set 9 does not exist"}, rank);
    const ProcessSet set = ops::add_process_set(rt, {0, 2});
    std::vector<float> v(2, rank + 1.0f);
    if (set.included()) {
      allreduce(rt, v, set.id(), "before").wait();
      EXPECT_EQ(v[0], 4.0f);
    }
    ops::remove_process_set(rt, set);
    if (set.included()) {
      expect_error([&] { allreduce(rt, v, set.id(), "after"); }, ErrorCode::kInvalidArgument,
                   {"process set 1 was removed"}, rank);
    }
    expect_error([&] { ops::remove_process_set(rt, set); }, ErrorCode::kInvalidArgument,
                 {"process set 1 was already removed"}, rank);
    // The same ranks again: a new set with a new id, which works.
    const ProcessSet again = ops::add_process_set(rt, {0, 2});
    EXPECT_EQ(again.id(), 2);
    if (again.included()) {
      std::vector<float> w(2, rank + 1.0f);
      allreduce(rt, w, again.id(), "before").wait();  // the old set's names are free
      EXPECT_EQ(w[0], 4.0f);
    }
    ops::barrier(rt, {}).wait();  // rank 1 (not a member) stays until the others are done
  });
}

TEST(ProcessSetTest, RemovalFailsWhatIsPendingOnTheSet) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    const ProcessSet set = ops::add_process_set(rt, {0, 1});
    std::vector<float> v(2, 1.0f);
    Handle lonely;
    if (rank == 0) lonely = allreduce(rt, v, set.id(), "lonely");  // rank 1 never submits it
    ops::remove_process_set(rt, set);
    if (rank == 0) {
      ASSERT_TRUE(lonely.wait_for(std::chrono::seconds(10)));
      EXPECT_EQ(lonely.error_code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(lonely.error_message().find(
                    "allreduce 'lonely': process set 1 was removed (kolo::remove_process_set) "
                    "while this operation was pending on rank 0"),
                std::string::npos)
          << lonely.error_message();
    }
    // The global set is unaffected.
    std::vector<float> g(2, rank + 1.0f);
    allreduce(rt, g, kGlobalProcessSet, "after").wait();
    EXPECT_EQ(g[0], 6.0f);
  });
}

TEST(ProcessSetTest, AnErrorInsideASetNamesTheSetAndItsRanks) {
  run_ranks(3, test_config(), [](int rank, Runtime& rt) {
    const ProcessSet set = ops::add_process_set(rt, {1, 2});
    if (!set.included()) {
      ops::barrier(rt, {}).wait();  // until the members are done
      return;
    }
    std::vector<float> f(2, 1.0f);
    std::vector<double> d(2, 1.0);
    AllreduceOptions o{.name = "mixed", .process_set = set.id()};
    Handle h = rank == 1 ? ops::allreduce(rt, {view_of(f, DataType::kFloat32)},
                                          {view_of(f, DataType::kFloat32)}, o, false)
                         : ops::allreduce(rt, {view_of(d, DataType::kFloat64)},
                                          {view_of(d, DataType::kFloat64)}, o, false);
    ASSERT_TRUE(h.wait_for(std::chrono::seconds(10)));
    EXPECT_EQ(h.error_code(), ErrorCode::kMismatch);
    EXPECT_NE(h.error_message().find("process set 1 (ranks 1, 2 of the job as its ranks 0, 1): "
                                     "Mismatched data types for allreduce 'mixed': float32 on "
                                     "rank 0; float64 on rank 1"),
              std::string::npos)
        << h.error_message();
    // Broadcast roots are ranks of the job: 0 is not a member, refused at once.
    std::vector<float> b(2, 1.0f);
    BroadcastOptions bo{.name = "root", .root = 0, .process_set = set.id()};
    expect_error([&] { ops::broadcast(rt, view_of(b, DataType::kFloat32), bo); },
                 ErrorCode::kInvalidArgument,
                 {"broadcast 'root': root rank 0 is not a member of process set 1 (ranks 1, 2)"},
                 rank);
    ops::barrier(rt, {}).wait();
  });
}

TEST(ProcessSetTest, RegistrationWhileARankHasJoinedFails) {
  run_ranks(2, test_config(), [](int rank, Runtime& rt) {
    if (rank == 1) {
      Handle j = ops::join(rt);
      j.wait();
      EXPECT_EQ(j.last_joined_rank(), 0);
      return;
    }
    expect_error(
        [&] {
          ops::add_process_set(rt, {0, 1});
        },
        ErrorCode::kInvalidArgument, {"add_process_set", "cannot run while rank 1 has joined"},
        rank);
    ops::join(rt).wait();
  });
}

// At 2, 3 and 4 ranks: the sets below reach past rank 0, so a root read as a rank of the
// set would pick another member (or be out of range) and give other values, silently.
class ProcessSetRanksTest : public ::testing::TestWithParam<int> {};

TEST_P(ProcessSetRanksTest, BroadcastRootsAreRanksOfTheJob) {
  const int n = GetParam();
  run_ranks(n, test_config(), [n](int rank, Runtime& rt) {
    std::vector<int> upper;  // every rank but 0
    for (int r = 1; r < n; ++r) upper.push_back(r);
    const ProcessSet set = ops::add_process_set(rt, upper);
    if (set.included()) {
      for (int root : upper) {
        std::vector<double> b(3, 10.0 * rank);
        BroadcastOptions bo{
            .name = "b" + std::to_string(root), .root = root, .process_set = set.id()};
        ops::broadcast(rt, view_of(b, DataType::kFloat64), bo).wait();
        for (double x : b) ASSERT_EQ(x, 10.0 * root) << "rank " << rank << ", root " << root;
      }
    }
    ops::barrier(rt, {}).wait();
  });
}

TEST_P(ProcessSetRanksTest, ARefusedRegistrationLeavesNoTrace) {
  const int n = GetParam();
  run_ranks(n, test_config(), [n](int rank, Runtime& rt) {
    const int joiner = n - 1;
    if (rank == joiner) {
      ops::join(rt).wait();
    } else {
      expect_error([&] { ops::add_process_set(rt, {0}); }, ErrorCode::kInvalidArgument,
                   {"cannot run while rank " + std::to_string(joiner) + " has joined"}, rank);
      ops::join(rt).wait();
    }
    // Every rank registers and removes sets as if the refused call had not been made.
    const ProcessSet set = ops::add_process_set(rt, {0});
    EXPECT_EQ(set.id(), 1);
    std::vector<float> v(2, rank + 1.0f);
    if (set.included()) {
      allreduce(rt, v, set.id(), "after").wait();
      EXPECT_EQ(v[0], 1.0f);
    }
    ops::remove_process_set(rt, set);
    EXPECT_EQ(ops::add_process_set(rt, {1}).id(), 2);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessSetRanksTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace kolo::core
