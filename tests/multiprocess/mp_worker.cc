// Worker program of the multi-process tests: run under kolorun or mpirun, it exercises
// the public API across real processes and checks every result against a reference it
// computes itself. Exit 0 = all checks passed.
//
//   mp_worker collectives   every collective, several dtypes and sizes, errors, join
//   mp_worker topology      prints "topology rank=.. size=.. local_rank=.. ..." and env
//   mp_worker idle          sleeps 3 s after init and prints the process's CPU time
//                           (what an idle runtime costs)
//   mp_worker die           the last rank kills itself (SIGKILL) while the others wait in
//                           an allreduce; they must fail with kPeerFailure naming it
//   mp_worker reinit        init -> allreduce checks -> shutdown, three times over
//   mp_worker no_shutdown   allreduce checks, then returns from main without shutdown()
//   mp_worker leave_early   the last rank returns from main without shutdown() while the
//                           others wait in an allreduce; they must fail naming it
//   mp_worker stopped_rank  rank 0 stops rank 1 (SIGSTOP) for 4 s around an allreduce;
//                           run with KOLO_STALL_CHECK_SECONDS=1: rank 0 warns meanwhile
//   mp_worker process_sets  4 ranks: sets {0,1} and {2,3} concurrently, {0,2} interleaved
//                           with the global set, the error cases, removal; with
//                           KOLO_LOG_LEVEL=info it checks from its log which sets got
//                           shared memory (KOLO_SHM=1: all; KOLO_TEST_HOSTS=2: those
//                           on one fake host; otherwise none)
//   mp_worker tick_race     under KOLO_TEST_TICK_RACE=1: rank 0's stall warnings name no
//                           rank that was on time
//   mp_worker set_rules     2+ ranks: broadcast roots are ranks of the job, the global
//                           set's ranks are refused, a refused registration leaves no trace
#include <sys/resource.h>
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <thread>

#include "core/testing/values.h"
#include "kolo/kolo.h"
#include "startup/config.h"

namespace {

using kolo::DataType;
using kolo::ReduceOp;
using kolo::core::testing::get_value;
using kolo::core::testing::set_value;
using kolo::core::testing::test_value;

int g_failures = 0;
// no_shutdown's buffers: never freed (the operations may still read them at exit), and
// reachable from here, so LeakSanitizer does not count them.
std::vector<float>* g_in_flight[8] = {};

#define CHECK(cond, ...)                                           \
  do {                                                             \
    if (!(cond)) {                                                 \
      ++g_failures;                                                \
      std::fprintf(stderr, "check failed at line %d: ", __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                           \
      std::fprintf(stderr, "\n");                                  \
    }                                                              \
  } while (0)

void check_allreduce(int rank, int n) {
  const auto& dtypes = kolo::core::testing::kAllDtypes;
  const auto& ops = kolo::core::testing::kAllOps;
  for (std::int64_t count : {0, 1, 7, 1024, 1 << 18}) {
    struct Op {
      DataType dtype;
      ReduceOp op;
      kolo::Tensor t;
      kolo::Handle h;
    };
    std::vector<Op> in_flight;
    for (DataType d : dtypes) {
      for (ReduceOp op : ops) {
        if (d == DataType::kBool && op == ReduceOp::kAverage) continue;
        in_flight.push_back({d, op, kolo::Tensor(d, {count}), {}});
      }
    }
    // Submit in a rank-dependent (rotated) order: negotiation must line them up.
    for (std::size_t k = 0; k < in_flight.size(); ++k) {
      Op& o = in_flight[(k + static_cast<std::size_t>(rank) * 5) % in_flight.size()];
      for (std::int64_t i = 0; i < count; ++i)
        set_value(o.t.data(), o.dtype, i, test_value(rank, i, o.dtype, o.op));
      o.h = kolo::allreduce_async(o.t.view(), o.t.view(),
                                  {.name = std::string("ar.") + kolo::dtype_name(o.dtype) +
                                           kolo::reduce_op_name(o.op) + std::to_string(count),
                                   .op = o.op});
    }
    for (auto& o : in_flight) {
      o.h.wait();
      for (std::int64_t i = 0; i < count; ++i) {
        double want = test_value(0, i, o.dtype, o.op);
        for (int r = 1; r < n; ++r)
          want = kolo::testing::fold_reference(o.op, want, test_value(r, i, o.dtype, o.op));
        if (o.dtype == DataType::kBool) want = want != 0;
        const bool is_float = kolo::core::testing::is_float(o.dtype);
        if (o.op == ReduceOp::kAverage) want = is_float ? want / n : std::trunc(want / n);
        const double got = get_value(o.t.data(), o.dtype, i);
        const double tol = is_float ? 1e-2 * std::abs(want) + 1e-3 : 0;
        if (std::abs(got - want) > tol) {
          CHECK(false, "%s element %lld: got %g want %g", o.h.name().c_str(),
                static_cast<long long>(i), got, want);
          break;
        }
      }
    }
  }
}

void check_others(int rank, int n) {
  // allgather with uneven first dims
  kolo::Tensor mine(DataType::kInt64, {rank + 1, 2});
  for (std::int64_t i = 0; i < mine.numel(); ++i) mine.data_as<std::int64_t>()[i] = rank * 100 + i;
  kolo::Tensor all = kolo::allgather(mine.view(), {.name = "ag"});
  CHECK(all.shape()[0] == n * (n + 1) / 2, "allgather rows %lld",
        static_cast<long long>(all.shape()[0]));
  std::int64_t k = 0;
  for (int r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < (r + 1) * 2; ++i, ++k)
      CHECK(all.data_as<std::int64_t>()[k] == r * 100 + i, "allgather value");
  }
  // broadcast from the last rank
  std::vector<float> b(1000, static_cast<float>(rank));
  kolo::TensorView bv{b.data(), DataType::kFloat32, {1000}};
  kolo::broadcast(bv, {.name = "bc", .root = n - 1});
  CHECK(b[999] == n - 1, "broadcast got %g", b[999]);
  // alltoall with splits: rank r sends j + 1 rows to rank j
  std::vector<std::int64_t> splits;
  std::int64_t rows = 0;
  for (int j = 0; j < n; ++j) splits.push_back(j + 1), rows += j + 1;
  kolo::Tensor send(DataType::kInt32, {rows});
  for (std::int64_t i = 0; i < rows; ++i)
    send.data_as<std::int32_t>()[i] = rank * 1000 + static_cast<int>(i);
  kolo::AlltoallResult a = kolo::alltoall(send.view(), {.name = "a2a", .splits = splits});
  CHECK(a.output.numel() == n * (rank + 1), "alltoall rows %lld",
        static_cast<long long>(a.output.numel()));
  for (int r = 0; r < n; ++r) CHECK(a.received_splits[r] == rank + 1, "received split");
  // reducescatter with rows that do not divide evenly
  const std::int64_t rs_rows = 2 * n + 1;
  kolo::Tensor rs_in(DataType::kFloat64, {rs_rows, 3});
  for (std::int64_t i = 0; i < rs_in.numel(); ++i) rs_in.data_as<double>()[i] = rank + i;
  kolo::Tensor rs = kolo::reducescatter(rs_in.view(), {.name = "rs", .op = ReduceOp::kSum});
  const std::int64_t my_rows = rs_rows / n + (rank < rs_rows % n ? 1 : 0);
  std::int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += rs_rows / n + (r < rs_rows % n ? 1 : 0);
  CHECK(rs.shape()[0] == my_rows, "reducescatter rows");
  for (std::int64_t i = 0; i < my_rows * 3; ++i) {
    CHECK(rs.data_as<double>()[i] == n * (n - 1) / 2.0 + n * double(first * 3 + i),
          "reducescatter value");
  }
  // a mismatch fails on every rank, and the job goes on
  std::vector<float> bad(rank == 0 ? 3 : 4, 1.0f);
  if (n > 1) try {
      kolo::allreduce(
          kolo::TensorView{bad.data(), DataType::kFloat32, {static_cast<std::int64_t>(bad.size())}},
          {.name = "mismatch"});
      CHECK(false, "mismatched shapes were accepted");
    } catch (const kolo::Error& e) {
      CHECK(e.code() == kolo::ErrorCode::kMismatch, "wrong code for mismatch: %s", e.what());
    }
  // join: the last rank runs out of data first; the others still allreduce
  if (rank == n - 1) {
    const int last = kolo::join();
    CHECK(last >= 0 && last < n - 1 + (n == 1), "join returned %d", last);
  } else {
    std::vector<float> g(10, 1.0f);
    kolo::allreduce(kolo::TensorView{g.data(), DataType::kFloat32, {10}},
                    {.name = "after-join", .op = ReduceOp::kSum});
    CHECK(g[0] == n - 1, "allreduce with a joined rank: %g", g[0]);
    // Averaged and postscaled, fused with a second tensor: the joined rank packs zeros
    // while the others reduce their tensors in place (shm: gather/scatter), in one
    // collective; the average still divides by every rank.
    std::vector<float> a(1000, 2.0f), b(37, 4.0f);
    const kolo::TensorView va{a.data(), DataType::kFloat32, {1000}};
    const kolo::TensorView vb{b.data(), DataType::kFloat32, {37}};
    kolo::Handle ha =
        kolo::allreduce_async(va, va, {.name = "after-join-avg.a", .postscale_factor = 3.0});
    kolo::Handle hb = kolo::allreduce_async(vb, vb, {.name = "after-join-avg.b"});
    ha.wait();
    hb.wait();
    const float want_a = 2.0f * (n - 1) / n * 3.0f, want_b = 4.0f * (n - 1) / n;
    CHECK(std::fabs(a[999] - want_a) < 1e-5f && std::fabs(b[0] - want_b) < 1e-5f,
          "averaged allreduce with a joined rank: %g (want %g), %g (want %g)", a[999], want_a, b[0],
          want_b);
    kolo::join();
  }
  kolo::barrier();
}

// autotune: enough fused steps for the whole search (the test sets KOLO_AUTOTUNE=1 with
// small samples and KOLO_AUTOTUNE_LOG), every result checked; then rank 0 reads the log:
// over the hierarchical transport the search must have measured both the hierarchical
// and the flat allreduce, and settled.
void run_autotune(int rank, int n) {
  for (int step = 0; step < 400; ++step) {
    std::vector<float> a(1000, static_cast<float>(rank + 1)), b(5000, 1.0f);
    const kolo::TensorView va{a.data(), DataType::kFloat32, {1000}};
    const kolo::TensorView vb{b.data(), DataType::kFloat32, {5000}};
    kolo::Handle ha = kolo::allreduce_async(va, va, {.name = "tune.a", .op = ReduceOp::kSum});
    kolo::Handle hb = kolo::allreduce_async(vb, vb, {.name = "tune.b", .op = ReduceOp::kSum});
    ha.wait();
    hb.wait();
    CHECK(a[999] == n * (n + 1) / 2.0f && b[0] == static_cast<float>(n), "step %d: got %g and %g",
          step, a[999], b[0]);
  }
  kolo::shutdown();  // closes the log
  // The log's path, as the runtime read it (KOLO_AUTOTUNE_LOG).
  kolo::core::Config config;
  const bool parsed = kolo::core::parse_config(kolo::core::process_env(), &config).ok();
  const char* path = config.autotune_log.c_str();
  if (rank != 0 || !parsed || !*path) return;
  std::FILE* f = std::fopen(path, "r");
  CHECK(f != nullptr, "cannot read %s", path);
  if (f == nullptr) return;
  // sample,phase,fusion_threshold_bytes,cycle_time_ms,hierarchical,...
  int hierarchical = 0, flat = 0, settled = 0;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    char phase[32];
    long long threshold;
    double cycle;
    int hier;
    if (std::sscanf(line, "%*d,%31[a-z],%lld,%lf,%d", phase, &threshold, &cycle, &hier) != 4)
      continue;
    const std::string p = phase;
    if (p == "search") (hier ? hierarchical : flat)++;
    if (p == "settled") ++settled;
  }
  std::fclose(f);
  CHECK(hierarchical > 0 && flat > 0 && settled == 1,
        "autotune log: %d hierarchical samples, %d flat, %d settled lines", hierarchical, flat,
        settled);
  std::printf("autotune log: %d hierarchical samples, %d flat, settled\n", hierarchical, flat);
}

int run_die(int rank, int n, bool error_exit = false) {
  std::vector<float> g(16, 1.0f);
  kolo::TensorView v{g.data(), DataType::kFloat32, {16}};
  kolo::allreduce(v, {.name = "warmup"});
  if (rank == n - 1 && error_exit) {
    // A program's own error, as a training loop that throws and returns 1 from main: the
    // process ends normally (kolo shuts down at exit) with a non-zero status, while the
    // others wait for it in a collective and fail with a peer failure.
    std::fprintf(stderr, "rank %d: failing with an error of its own\n", rank);
    std::fflush(stderr);
    std::exit(1);
  }
  if (rank == n - 1) {
    std::fprintf(stderr, "rank %d: killing myself\n", rank);
    std::fflush(stderr);
    kill(getpid(), SIGKILL);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    kolo::allreduce(v, {.name = "never-completes"});
    std::fprintf(stderr, "rank %d: allreduce completed without the dead rank\n", rank);
    return 1;
  } catch (const kolo::Error& e) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "rank %d: peer failure after %.1f s: %s\n", rank, s, e.what());
    // Exit without kolo::shutdown(): the transport is broken.
    std::_Exit(e.code() == kolo::ErrorCode::kPeerFailure ? 3 : 1);
  }
}

// kolo::init() is already done; two more rounds follow the first (kolo.h: init may be
// called again after shutdown, as in Horovod's tests).
void run_reinit(int rank, int n) {
  for (int round = 0; round < 3; ++round) {
    if (round > 0) kolo::init();
    CHECK(kolo::rank() == rank && kolo::size() == n, "round %d: rank %d of %d", round, kolo::rank(),
          kolo::size());
    check_allreduce(rank, n);
    kolo::shutdown();
    CHECK(!kolo::is_initialized(), "round %d: still initialized after shutdown", round);
  }
  std::printf("rank %d of %d: reinit 3 rounds %s\n", rank, n, g_failures ? "FAILED" : "OK");
}

int run_leave_early(int rank, int n) {
  std::vector<float> g(16, 1.0f);
  kolo::TensorView v{g.data(), DataType::kFloat32, {16}};
  kolo::allreduce(v, {.name = "warmup"});
  if (rank == n - 1) return 0;  // leaves without kolo::shutdown()
  try {
    kolo::allreduce(v, {.name = "waits-for-the-last-rank"});
    std::fprintf(stderr, "rank %d: allreduce completed without the rank that left\n", rank);
    return 1;
  } catch (const kolo::Error& e) {
    const std::string want = "rank " + std::to_string(n - 1) + " left: the program ended";
    CHECK(e.code() == kolo::ErrorCode::kShutdown, "code %d", static_cast<int>(e.code()));
    CHECK(std::string(e.what()).find(want) != std::string::npos, "message: %s", e.what());
    std::printf("rank %d: leave_early %s: %s\n", rank, g_failures ? "FAILED" : "OK", e.what());
  }
  kolo::shutdown();
  return g_failures ? 1 : 0;
}

// Rank 1 of stopped_rank: set when rank 0's SIGCONT has woken this process.
volatile std::sig_atomic_t g_continued = 0;
void on_continue(int) { g_continued = 1; }

int run_stopped_rank(int rank, int n) {
  CHECK(n == 2, "stopped_rank runs on 2 ranks, not %d", n);
  if (rank == 1) {
    // Before rank 0 can know this process's pid.
    struct sigaction sa = {};
    sa.sa_handler = on_continue;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGCONT, &sa, nullptr);
  }
  std::int64_t pid = getpid();
  kolo::TensorView p{&pid, DataType::kInt64, {1}};
  kolo::Tensor pids = kolo::allgather(p, {.name = "pids"});
  std::vector<float> g(16, 1.0f);
  kolo::TensorView v{g.data(), DataType::kFloat32, {16}};
  if (rank == 0) {
    const pid_t other = static_cast<pid_t>(static_cast<const std::int64_t*>(pids.data())[1]);
    // This rank's log lines (stderr) go to a file while rank 1 is stopped, to be checked.
    std::fflush(stderr);
    char path[] = "/tmp/kolo-stopped-rank-XXXXXX";
    const int log = mkstemp(path);
    const int saved = dup(2);
    dup2(log, 2);
    kill(other, SIGSTOP);
    kolo::Handle h = kolo::allreduce_async(v, v, {.name = "while-rank-1-is-stopped"});
    std::this_thread::sleep_for(std::chrono::seconds(4));
    kill(other, SIGCONT);
    h.wait();
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string logged(4096, '\0');
    const ssize_t got = pread(log, logged.data(), logged.size(), 0);
    logged.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
    close(log);
    unlink(path);
    std::fprintf(stderr, "%s", logged.c_str());
    CHECK(logged.find("rank 0 has waited") != std::string::npos &&
              logged.find("s in negotiation for rank 1") != std::string::npos,
          "no warning naming rank 1 while it was stopped; rank 0 logged: %s", logged.c_str());
  } else {
    // Submit only after rank 0 has stopped and continued this process, so that it was
    // stopped outside any collective and rank 0 waited in negotiation (a rank stopped
    // inside a data-plane collective is reported by the peer timeout alone). A fixed 1 s
    // sleep here failed when rank 0 reached its kill() later than that on a loaded
    // machine: rank 1 had submitted and put its part of the next negotiation into the
    // MPI control collective, so rank 0's negotiation completed without it, rank 0 waited
    // in the data-plane allreduce instead, and logged nothing
    // (multiprocess.mpirun.stopped_rank_shm0_np2: 2 of 12 runs failed with two CPU burners
    // running, 0 of 12 with this wait).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (g_continued == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(g_continued != 0, "rank 0 did not stop and continue this process within 60 s");
    kolo::allreduce(v, {.name = "while-rank-1-is-stopped"});
  }
  CHECK(g[0] == 1.0f, "average %g", g[0]);
  std::printf("rank %d: stopped_rank %s\n", rank, g_failures ? "FAILED" : "OK");
  kolo::shutdown();
  return g_failures ? 1 : 0;
}

// Runs fn with this process's stderr (kolo's log) going to a file; returns what it wrote
// there (and writes it to stderr afterwards).
template <typename F>
std::string capture_log(F&& fn) {
  std::fflush(stderr);
  char path[] = "/tmp/kolo-process-sets-XXXXXX";
  const int log = mkstemp(path);
  const int saved = dup(2);
  dup2(log, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string logged(1 << 16, '\0');
  const ssize_t got = pread(log, logged.data(), logged.size(), 0);
  logged.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  close(log);
  unlink(path);
  std::fprintf(stderr, "%s", logged.c_str());
  return logged;
}

// Under KOLO_TEST_TICK_RACE=1 every control call of rank 0 ticks its wait observer 500 ms
// in, when the peers' messages have arrived: the observer must not name them.
int run_tick_race(int rank, int n) {
  std::vector<float> g(16, static_cast<float>(rank + 1));
  kolo::TensorView v{g.data(), DataType::kFloat32, {16}};
  const auto start = std::chrono::steady_clock::now();
  const std::string logged = capture_log([&] {
    for (int i = 0; i < 3; ++i)
      kolo::allreduce(v, {.name = "tick-race." + std::to_string(i), .op = ReduceOp::kSum});
  });
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Each sum multiplies by 1 + 2 + ... + n only on the first pass: later passes sum n
  // equal values, so the result is n * (n + 1) / 2 * n * n.
  const float want = static_cast<float>(n * (n + 1) / 2 * n * n);
  CHECK(g[0] == want, "sum %g, want %g", g[0], want);
  if (rank == 0) {
    CHECK(took >= 1.5, "3 allreduces took %.2f s: KOLO_TEST_TICK_RACE=1 did not slow rank 0", took);
    CHECK(logged.find("in negotiation for") == std::string::npos,
          "rank 0 named ranks that were on time: %s", logged.c_str());
  }
  std::printf("rank %d: tick_race %s\n", rank, g_failures ? "FAILED" : "OK");
  kolo::shutdown();
  return g_failures ? 1 : 0;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// Adds a set; on its members, checks from the log whether it got shared memory.
kolo::ProcessSet add_set(int rank, std::vector<int> ranks, bool one_host) {
  kolo::ProcessSet set;
  const std::string logged = capture_log([&] { set = kolo::add_process_set(ranks); });
  if (env_or("KOLO_LOG_LEVEL", "") != "info" || !set.included()) return set;
  const bool shm_on = env_or("KOLO_SHM", "auto") != "0";
  const bool expect = shm_on && one_host && set.size() > 1;
  const bool got = logged.find("shared-memory transport: " + std::to_string(set.size()) +
                               " ranks") != std::string::npos;
  CHECK(got == expect, "rank %d: process set %d %s shared memory; its log: %s", rank, set.id(),
        expect ? "lacks" : "has", logged.c_str());
  return set;
}

template <typename F>
void expect_error(F&& fn, kolo::ErrorCode code, const std::string& part, int rank) {
  try {
    fn();
    CHECK(false, "rank %d: no error, expected one with '%s'", rank, part.c_str());
  } catch (const kolo::Error& e) {
    CHECK(e.code() == code && std::string(e.what()).find(part) != std::string::npos,
          "rank %d: expected '%s', got: %s", rank, part.c_str(), e.what());
  }
}

int run_process_sets(int rank, int n) {
  CHECK(n == 4, "process_sets runs on 4 ranks, not %d", n);
  if (n != 4) return 1;
  const int hosts = std::atoi(env_or("KOLO_TEST_HOSTS", "1").c_str());
  const auto host = [hosts](int r) { return hosts > 1 ? r / (4 / hosts) : 0; };
  const kolo::ProcessSet low = add_set(rank, {1, 0}, host(0) == host(1));
  const kolo::ProcessSet high = add_set(rank, {2, 3}, host(2) == host(3));
  const kolo::ProcessSet& mine = rank < 2 ? low : high;
  CHECK(mine.included() && mine.rank() == rank % 2 && mine.size() == 2, "rank %d: set %d rank %d",
        rank, mine.id(), mine.rank());
  // Disjoint sets, concurrently: several sizes (fused and chunked), allgather, broadcast.
  const std::vector<std::size_t> sizes = {1, 1000, 300000, 7};
  for (int step = 0; step < 10; ++step) {
    std::vector<std::vector<float>> bufs;
    std::vector<kolo::Handle> hs;
    for (std::size_t k = 0; k < sizes.size(); ++k)
      bufs.emplace_back(sizes[k], (rank + 1.0f) * (k + 1));
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      kolo::TensorView v{bufs[k].data(), DataType::kFloat32, {static_cast<std::int64_t>(sizes[k])}};
      hs.push_back(
          kolo::allreduce_async(v, v,
                                {.name = "ar." + std::to_string(step) + "." + std::to_string(k),
                                 .op = ReduceOp::kSum,
                                 .process_set = mine.id()}));
    }
    std::int32_t me = rank;
    kolo::Handle g =
        kolo::allgather_async({&me, DataType::kInt32, {1}},
                              {.name = "ag." + std::to_string(step), .process_set = mine.id()});
    double b = rank;
    // The root is a rank of the job (Horovod's rule): the set's second member.
    kolo::broadcast(
        {&b, DataType::kFloat64, {1}},
        {.name = "bc." + std::to_string(step), .root = mine.ranks()[1], .process_set = mine.id()});
    for (auto& h : hs) h.wait();
    g.wait();
    float members = 0;
    for (int r : mine.ranks()) members += r + 1.0f;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      for (float x : bufs[k]) {
        if (x != members * (k + 1)) {
          CHECK(false, "rank %d step %d tensor %zu: %g, expected %g", rank, step, k, x,
                members * (k + 1));
          break;
        }
      }
    }
    const auto* got = g.output().data_as<std::int32_t>();
    CHECK(g.output().numel() == 2 && got[0] == mine.ranks()[0] && got[1] == mine.ranks()[1],
          "rank %d: allgather on set %d", rank, mine.id());
    CHECK(b == mine.ranks()[1], "rank %d: broadcast from rank %d gave %g", rank, mine.ranks()[1],
          b);
  }
  // {0, 2} interleaved with the global set.
  const kolo::ProcessSet ends = add_set(rank, {0, 2}, host(0) == host(2));
  for (int step = 0; step < 10; ++step) {
    std::vector<float> all(1000, rank + 1.0f), some(1000, rank + 1.0f);
    kolo::TensorView va{all.data(), DataType::kFloat32, {1000}};
    kolo::TensorView vs{some.data(), DataType::kFloat32, {1000}};
    kolo::Handle hg =
        kolo::allreduce_async(va, va, {.name = "g." + std::to_string(step), .op = ReduceOp::kSum});
    kolo::Handle he;
    if (ends.included()) {
      he = kolo::allreduce_async(
          vs, vs,
          {.name = "e." + std::to_string(step), .op = ReduceOp::kSum, .process_set = ends.id()});
    }
    hg.wait();
    CHECK(all[999] == 10.0f, "rank %d: global sum %g", rank, all[999]);
    if (he.valid()) {
      he.wait();
      CHECK(some[999] == 4.0f, "rank %d: {0,2} sum %g", rank, some[999]);
    }
  }
  // Errors: a non-member, different ranks on different ranks, ops on a removed set.
  std::vector<float> v(4, 1.0f);
  kolo::TensorView tv{v.data(), DataType::kFloat32, {4}};
  if (!ends.included()) {
    expect_error([&] { kolo::allreduce(tv, {.name = "x", .process_set = ends.id()}); },
                 kolo::ErrorCode::kInvalidArgument,
                 "is not a member of process set " + std::to_string(ends.id()), rank);
  }
  expect_error(
      [&] {
        kolo::add_process_set({0, rank == 0 ? 1 : 3});
      },
      kolo::ErrorCode::kMismatch, "[0, 1] on rank 0; [0, 3] on ranks 1, 2, 3", rank);
  kolo::remove_process_set(ends);
  if (ends.included()) {
    expect_error([&] { kolo::allreduce(tv, {.name = "y", .process_set = ends.id()}); },
                 kolo::ErrorCode::kInvalidArgument, "was removed", rank);
  }
  kolo::remove_process_set(low);
  kolo::remove_process_set(high);
  kolo::barrier();
  std::printf("rank %d: process_sets %s\n", rank, g_failures ? "FAILED" : "OK");
  kolo::shutdown();
  return g_failures ? 1 : 0;
}

// At any size from 2: the rules that ported Horovod programs rely on. A broadcast root
// is a rank of the job (a set of ranks 1..n-1, so a root read as a rank of the set would
// pick another member); the set of every rank is the global set; a registration refused
// while a rank has joined leaves no trace (the next one works on every rank).
int run_set_rules(int rank, int n) {
  std::vector<int> upper;
  for (int r = 1; r < n; ++r) upper.push_back(r);
  const kolo::ProcessSet set = kolo::add_process_set(upper);
  if (set.included()) {
    for (int root : upper) {
      double b = 10.0 * rank;
      kolo::broadcast(
          {&b, DataType::kFloat64, {1}},
          {.name = "root." + std::to_string(root), .root = root, .process_set = set.id()});
      CHECK(b == 10.0 * root, "rank %d: broadcast from rank %d in set %d gave %g", rank, root,
            set.id(), b);
    }
    double b = 0;
    expect_error(
        [&] {
          kolo::broadcast({&b, DataType::kFloat64, {1}},
                          {.name = "outsider", .root = 0, .process_set = set.id()});
        },
        kolo::ErrorCode::kInvalidArgument, "root rank 0 is not a member of process set", rank);
  }
  std::vector<int> all;
  for (int r = n - 1; r >= 0; --r) all.push_back(r);
  expect_error([&] { kolo::add_process_set(all); }, kolo::ErrorCode::kInvalidArgument,
               "duplicate of the global process set", rank);
  const int joiner = n - 1;
  if (rank != joiner) {
    expect_error([&] { kolo::add_process_set({0}); }, kolo::ErrorCode::kInvalidArgument,
                 "cannot run while rank " + std::to_string(joiner) + " has joined", rank);
  }
  kolo::join();
  const kolo::ProcessSet after = kolo::add_process_set({0});
  CHECK(after.id() == set.id() + 1, "rank %d: the set after the refusals has id %d, not %d", rank,
        after.id(), set.id() + 1);
  kolo::remove_process_set(after);
  kolo::remove_process_set(set);
  kolo::barrier();
  std::printf("rank %d of %d: set_rules %s\n", rank, n, g_failures ? "FAILED" : "OK");
  kolo::shutdown();
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  try {
    kolo::init();
    const int rank = kolo::rank(), n = kolo::size();
    if (mode == "reinit") {
      run_reinit(rank, n);
      return g_failures ? 1 : 0;
    } else if (mode == "no_shutdown") {
      check_allreduce(rank, n);
      // Leave with work in flight, so the runtime's thread is busy while exit runs.
      // Another rank may leave first: then submitting fails, which is fine here.
      try {
        for (int i = 0; i < 8; ++i) {
          g_in_flight[i] = new std::vector<float>(1 << 20, 1.0f);
          kolo::TensorView v{g_in_flight[i]->data(), DataType::kFloat32, {1 << 20}};
          (void)kolo::allreduce_async(v, v, {.name = "in-flight-at-exit." + std::to_string(i)});
        }
      } catch (const kolo::Error& e) {
        CHECK(e.code() == kolo::ErrorCode::kShutdown, "%s", e.what());
      }
      std::printf("rank %d of %d: returning without kolo::shutdown()\n", rank, n);
      return g_failures ? 1 : 0;
    } else if (mode == "leave_early") {
      return run_leave_early(rank, n);
    } else if (mode == "process_sets") {
      return run_process_sets(rank, n);
    } else if (mode == "set_rules") {
      return run_set_rules(rank, n);
    } else if (mode == "tick_race") {
      return run_tick_race(rank, n);
    } else if (mode == "stopped_rank") {
      return run_stopped_rank(rank, n);
    } else if (mode == "topology") {
      const char* env[] = {"KOLO_RANK",       "KOLO_SIZE",       "KOLO_LOCAL_RANK",
                           "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK", "KOLO_CROSS_SIZE"};
      std::printf(
          "topology rank=%d size=%d local_rank=%d local_size=%d cross_rank=%d cross_size=%d", rank,
          n, kolo::local_rank(), kolo::local_size(), kolo::cross_rank(), kolo::cross_size());
      for (const char* e : env) std::printf(" %s=%s", e, std::getenv(e) ? std::getenv(e) : "unset");
      std::printf("\n");
    } else if (mode == "idle") {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      rusage u;
      getrusage(RUSAGE_SELF, &u);
      const double cpu =
          u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
      std::printf("rank %d idle for 3 s used %.3f s of CPU (%.1f%% of a core)\n", rank, cpu,
                  cpu / 3 * 100);
    } else if (mode == "die") {
      return run_die(rank, n);
    } else if (mode == "error_exit") {
      return run_die(rank, n, /*error_exit=*/true);
    } else if (mode == "autotune") {
      run_autotune(rank, n);
    } else {
      check_allreduce(rank, n);
      check_others(rank, n);
      std::printf("rank %d of %d: collectives %s\n", rank, n, g_failures ? "FAILED" : "OK");
    }
    kolo::shutdown();
  } catch (const kolo::Error& e) {
    std::fprintf(stderr, "kolo error: %s\n", e.what());
    return 1;
  }
  return g_failures ? 1 : 0;
}
