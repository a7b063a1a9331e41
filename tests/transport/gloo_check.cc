// kolo_gloo_check: end-to-end check of the Gloo transport across real processes, started
// by kolorun's own launcher with 2-4 ranks (the job's store is kolorun's; check_job.h).
//
// Runs the transport-agnostic sweep of collective_checks.h (every collective, dtype and
// op at sizes 0..2^20 + 3 against references; the control plane; argument errors). With
// --kill-test one rank leaves (exits without shutting down, or with --sigkill SIGKILLs
// itself) and the others must get kPeerFailure naming it within a few seconds. Prints
// PASS/FAIL lines; exits non-zero on any failure. --bench times 64 MiB allreduce and
// reducescatter.
//
// Then the checks of kolo's own ring allreduce (gloo_ring.cc) beyond the sweep's
// allreduce(): allreduce_pieces over piece layouts whose boundaries fall inside the ring's
// segments (staged) and on them, empty and one-element pieces, in place and not, postscale
// and divisor, prescale (packed first), for every dtype and op against the references;
// ranks mixing allreduce() on a packed buffer with allreduce_pieces in one call (as a
// joined rank does); and inexact float inputs, whose results must be the same bits on
// every rank (the ring folds each element once, in one order, and copies the result).
//
// With --cut-test rank 0's calls are interrupted mid-transfer (run_cut_test).
//
//   kolorun -np 3 kolo_gloo_check [--bench | --cut-test]
//   kolorun -np 2 kolo_gloo_check --cut-test --stop
//   kolorun -np 3 kolo_gloo_check --kill-test [--kill-rank R] [--kill-op and|gather|allreduce]
//                                 [--sigkill]
//
// Not for: the runtime's semantics (tests/multiprocess).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check_harness.h"
#include "check_job.h"
#include "collective_checks.h"
#include "common/reduce.h"

namespace kolo::transport {
namespace {

using std::chrono::duration;

// --bench: medians of 10 timed calls (after 2 warm-ups) on 64 MiB of float32: allreduce,
// reducescatter (equal blocks: the ring), and the allreduce-then-slice it replaced.
void run_bench(Communicator* comm) {
  const std::size_t count = std::size_t{16} << 20, block = count / comm->size();
  std::vector<float> data(count, 1.0f), out(block), scratch(count);
  std::vector<std::size_t> counts(comm->size(), block);
  auto time_it = [&](const char* what, auto call) {
    std::vector<double> t;
    for (int i = 0; i < 12; ++i) {
      if (!comm->barrier(collective_check::soon()).ok()) return;
      const auto start = Clock::now();
      const Status s = call();
      if (!s.ok()) {
        std::printf("FAIL [rank %d] %s: %s\n", comm->rank(), what, s.to_string().c_str());
        return;
      }
      if (i >= 2) t.push_back(duration<double>(Clock::now() - start).count());
    }
    std::sort(t.begin(), t.end());
    if (comm->rank() == 0) {
      std::printf("%-44s median %8.1f ms  best %8.1f ms  (%d ranks)\n", what, t[t.size() / 2] * 1e3,
                  t[0] * 1e3, comm->size());
    }
  };
  auto reducescatter = [&] {
    return comm->reducescatter(data.data(), out.data(), counts, DataType::kFloat32, ReduceOp::kSum,
                               collective_check::soon());
  };
  auto allreduce = [&] {
    return comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum,
                           collective_check::soon());
  };
  time_it("allreduce 4 KiB f32", [&] {
    return comm->allreduce(data.data(), 1024, DataType::kFloat32, ReduceOp::kSum,
                           collective_check::soon());
  });
  time_it("allreduce 4 KiB f32, 10 back to back", [&] {
    Status s;
    for (int k = 0; k < 10 && s.ok(); ++k) {
      s = comm->allreduce(data.data(), 1024, DataType::kFloat32, ReduceOp::kSum,
                          collective_check::soon());
    }
    return s;
  });
  time_it("allreduce 64 MiB f32", allreduce);
  time_it("reducescatter 64 MiB f32 (ring)", reducescatter);
  time_it("allreduce 64 MiB f32, then this rank's block", [&] {
    std::copy(data.begin(), data.end(), scratch.begin());
    const Status s = comm->allreduce(scratch.data(), count, DataType::kFloat32, ReduceOp::kSum,
                                     collective_check::soon());
    std::copy_n(scratch.data() + comm->rank() * block, block, out.data());
    return s;
  });
}

// --- kolo's ring allreduce (gloo_ring.cc) ---

using check::fold;
using check::input;
using check::load;
using check::store;

// Element i of the reference: the fold of every rank's input, in rank order (exact).
std::int64_t reference(int size, std::size_t i, DataType dt, ReduceOp op) {
  std::int64_t v = input(0, i, dt, op);
  for (int r = 1; r < size; ++r) v = fold(dt, op, v, input(r, i, dt, op));
  return v;
}

// Piece layouts (element counts). The ring cuts 512 KiB segments: for 4-byte elements
// 131072 elements, so these boundaries fall inside segments (staged), on them, and
// next to empty and one-element pieces.
std::vector<std::vector<std::size_t>> layouts(bool large) {
  if (!large) return {{1}, {0, 3, 0, 1, 5}, {7, 1, 1, 1, 2, 0, 1000}};
  return {{1, 131071, 3, 0, 131072, 262144 + 9, 1, 5}, {300001, 2, 70000}};
}

void check_pieces(Communicator* comm, check::Checker* chk, DataType dt) {
  const int n = comm->size(), me = comm->rank();
  const std::size_t es = dtype_size(dt);
  const bool scalable = dt != DataType::kBool;
  for (ReduceOp op : check::kOps) {
    for (bool large : {false, true}) {
      if (large && !check::large_case(dt, op)) continue;
      for (const auto& layout : layouts(large)) {
        for (int mode = 0; mode < 4; ++mode) {
          // 0: in place; 1: separate outputs; 2: postscale 1/2 and divisor n (sum only,
          // not bool); 3: prescale 2 (packed first; sum only, not bool).
          if (mode >= 2 && (op != ReduceOp::kSum || !scalable || large)) continue;
          std::size_t total = 0;
          for (std::size_t c : layout) total += c;
          std::vector<char> in(total * es + 1), out(total * es + 1);
          for (std::size_t i = 0; i < total; ++i) store(dt, in.data(), i, input(me, i, dt, op));
          std::vector<AllreducePiece> pieces;
          std::size_t at = 0;
          for (std::size_t c : layout) {
            AllreducePiece p;
            p.in = in.data() + at * es;
            p.out = (mode == 1 ? out.data() : in.data()) + at * es;
            p.count = c;
            if (mode == 2) p.postscale = 0.5, p.divisor = n;
            if (mode == 3) p.prescale = 2.0;
            pieces.push_back(p);
            at += c;
          }
          const std::string what = std::string("allreduce_pieces ") + dtype_name(dt) + " " +
                                   reduce_op_name(op) + " total=" + std::to_string(total) +
                                   " pieces=" + std::to_string(layout.size()) +
                                   " mode=" + std::to_string(mode);
          chk->count();
          if (!chk->expect_ok(comm->allreduce_pieces(pieces, dt, op, collective_check::soon()),
                              what)) {
            continue;
          }
          // The expected values, computed the way the runtime's packing would.
          std::vector<char> want(total * es + 1);
          for (std::size_t i = 0; i < total; ++i) {
            const std::int64_t v = reference(n, i, dt, op);
            store(dt, want.data(), i, mode == 3 ? 2 * v : v);
          }
          if (mode == 2) scale(want.data(), total, dt, 0.5, n);
          const char* got = mode == 1 ? out.data() : in.data();
          if (std::memcmp(got, want.data(), total * es) != 0) {
            std::size_t i = 0;
            while (std::memcmp(got + i * es, want.data() + i * es, es) == 0) ++i;
            chk->fail(what + ": element " + std::to_string(i) + " is " +
                      std::to_string(load(dt, got, i)) + ", expected " +
                      std::to_string(load(dt, want.data(), i)));
          }
        }
      }
    }
  }
}

// Rank 0 reduces a packed buffer with allreduce() while the others pass pieces: the same
// messages, the same results.
void check_mixed(Communicator* comm, check::Checker* chk) {
  const int n = comm->size(), me = comm->rank();
  const DataType dt = DataType::kInt32;
  const std::vector<std::size_t> layout = {5, 131075, 2, 0, 200000};
  std::size_t total = 0;
  for (std::size_t c : layout) total += c;
  std::vector<std::int32_t> buf(total);
  for (std::size_t i = 0; i < total; ++i)
    store(dt, buf.data(), i, input(me, i, dt, ReduceOp::kSum));
  Status s;
  if (me == 0) {
    s = comm->allreduce(buf.data(), total, dt, ReduceOp::kSum, collective_check::soon());
  } else {
    std::vector<AllreducePiece> pieces;
    std::size_t at = 0;
    for (std::size_t c : layout) {
      pieces.push_back({.in = buf.data() + at, .out = buf.data() + at, .count = c});
      at += c;
    }
    s = comm->allreduce_pieces(pieces, dt, ReduceOp::kSum, collective_check::soon());
  }
  chk->count();
  if (!chk->expect_ok(s, "mixed allreduce / allreduce_pieces")) return;
  for (std::size_t i = 0; i < total; ++i) {
    if (buf[i] != reference(n, i, dt, ReduceOp::kSum)) {
      chk->fail("mixed allreduce / allreduce_pieces: element " + std::to_string(i) + " is " +
                std::to_string(buf[i]) + ", expected " +
                std::to_string(reference(n, i, dt, ReduceOp::kSum)));
      return;
    }
  }
}

// Inexact inputs (every rank's own pseudo-random floats): rank 0's result bytes are
// broadcast and every rank compares its own with them.
void check_same_bits(Communicator* comm, check::Checker* chk) {
  const int me = comm->rank();
  for (DataType dt :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct}) {
      for (std::size_t count : {std::size_t{1}, std::size_t{1001}, std::size_t{600000}}) {
        for (bool pieces : {false, true}) {
          const std::size_t es = dtype_size(dt);
          std::vector<char> buf(count * es), theirs;
          std::uint64_t x = 0x9e3779b97f4a7c15ull * (me + 1);
          for (std::size_t i = 0; i < count; ++i) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const double v = 0.75 + static_cast<double>(x % 1000003) / 2000006.0;  // [0.75, 1.25)
            switch (dt) {
              case DataType::kFloat32: {
                const float f = static_cast<float>(v);
                std::memcpy(buf.data() + i * 4, &f, 4);
                break;
              }
              case DataType::kFloat64:
                std::memcpy(buf.data() + i * 8, &v, 8);
                break;
              case DataType::kFloat16: {
                const std::uint16_t h = float_to_half(static_cast<float>(v));
                std::memcpy(buf.data() + i * 2, &h, 2);
                break;
              }
              default: {
                const std::uint16_t b = float_to_bfloat16(static_cast<float>(v));
                std::memcpy(buf.data() + i * 2, &b, 2);
                break;
              }
            }
          }
          const std::string what = std::string("same bits on every rank: ") + dtype_name(dt) + " " +
                                   reduce_op_name(op) + " n=" + std::to_string(count) +
                                   (pieces ? " (3 pieces)" : "");
          Status s;
          if (pieces) {
            const std::size_t a = count / 3, b = count - a - count / 4;
            s = comm->allreduce_pieces(
                {{.in = buf.data(), .out = buf.data(), .count = a},
                 {.in = buf.data() + a * es, .out = buf.data() + a * es, .count = b - a},
                 {.in = buf.data() + b * es, .out = buf.data() + b * es, .count = count - b}},
                dt, op, collective_check::soon());
          } else {
            s = comm->allreduce(buf.data(), count, dt, op, collective_check::soon());
          }
          chk->count();
          if (!chk->expect_ok(s, what)) continue;
          theirs = buf;
          if (!chk->expect_ok(
                  comm->broadcast(theirs.data(), theirs.size(), 0, collective_check::soon()),
                  what + " (broadcast of rank 0's result)")) {
            continue;
          }
          if (theirs != buf) {
            std::size_t i = 0;
            while (std::memcmp(buf.data() + i * es, theirs.data() + i * es, es) == 0) ++i;
            chk->fail(what + ": element " + std::to_string(i) + " is " +
                      std::to_string(load(dt, buf.data(), i)) + " here but " +
                      std::to_string(load(dt, theirs.data(), i)) + " on rank 0");
          }
        }
      }
    }
  }
}

int run_ring_checks(Communicator* comm) {
  const auto start = Clock::now();
  check::Checker chk(comm, std::chrono::seconds(30));
  for (DataType dt : check::kDtypes) {
    check_pieces(comm, &chk, dt);
    chk.end_group(std::string("ring allreduce_pieces ") + dtype_name(dt) +
                  ": every op, staged and direct segments, in place, out of place, scaled");
  }
  check_mixed(comm, &chk);
  chk.end_group("ring: allreduce on rank 0 with allreduce_pieces elsewhere in one call");
  check_same_bits(comm, &chk);
  chk.end_group("ring: inexact float inputs give the same bits on every rank");
  std::vector<std::uint64_t> ok = {chk.failures() == 0 ? 1u : 0u};
  const Status s = comm->control_and(ok, collective_check::soon());
  if (comm->rank() == 0) {
    std::printf("kolo_gloo_check ring: %s (%d cases per rank, %d ranks, %.1f s)\n",
                s.ok() && ok[0] == 1 ? "ALL PASS" : "FAILED", chk.total_cases(), comm->size(),
                duration<double>(Clock::now() - start).count());
  }
  return chk.failures() == 0 && s.ok() ? 0 : 1;
}

// --cut-test: rank 0's communicator is interrupted (set_interrupt) in the middle of a
// stream of 64 MiB ring allreduces, at a different moment in each of kAttempts fresh
// subset communicators; its watchdog shuts its sockets down. The peers see them close
// before rank 0 records why: they must find its record (failed_members) within the 1.5 s
// limit, not after fail()'s 2.3 s search for gone processes.
// --cut-test --stop (2 ranks): the calls are reducescatters whose block 1 is almost 64 MiB
// and block 0 4 KiB (one message per ring step: rank 0 receives 4 KiB and sends the rest),
// and rank 1 SIGSTOPs itself 100 ms before the interrupt, so that rank 0 almost always
// waits for the send of a message partly written: a wait gloo does not end when its pair
// fails (tcp::Pair::signalException ends only pending messages' waits, not the one in its
// write queue). The watchdog must abort it (wait_data). Rank 0 must fail within the
// limit; then it SIGCONTs rank 1, which must fail too (no time limit: it was stopped).
int run_cut_test(Communicator* world, bool stop) {
  constexpr int kAttempts = 12;
  constexpr double kLimit = 1.5;
  const int me = world->rank();
  std::vector<int> all(static_cast<std::size_t>(world->size()));
  for (int r = 0; r < world->size(); ++r) all[r] = r;
  std::vector<std::string> pids;
  if (stop) {
    const Status s =
        world->control_gather(std::to_string(getpid()), &pids, collective_check::soon());
    if (!s.ok() || world->size() != 2) {
      std::printf("FAIL [rank %d] cut-test --stop: needs 2 ranks (%s)\n", me,
                  s.to_string().c_str());
      return 1;
    }
  }
  std::vector<float> data(std::size_t{16} << 20, 1.0f);
  std::vector<float> out(data.size());
  const std::vector<std::size_t> counts = {1024, data.size() - 1024};
  int failures = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::unique_ptr<Communicator> comm;
    Status s = world->subset(all, &comm);
    if (!s.ok()) {
      std::printf("FAIL [rank %d] cut-test: subset: %s\n", me, s.to_string().c_str());
      return 1;
    }
    // The moment moves through the calls: 160 ms plus 37 ms per attempt.
    const auto start = Clock::now();
    const auto fire = start + std::chrono::milliseconds(160 + 37 * attempt);
    if (me == 0) {
      (void)comm->set_interrupt([fire](std::string* why) {
        if (Clock::now() < fire) return false;
        *why = "the test's interrupt";
        return true;
      });
    }
    std::thread stopper;
    if (stop && me == 1) {
      stopper = std::thread([fire] {
        std::this_thread::sleep_until(fire - std::chrono::milliseconds(100));
        raise(SIGSTOP);
      });
    }
    int calls = 0;
    while (s.ok() && Clock::now() - start < std::chrono::seconds(30)) {
      const Deadline deadline = Clock::now() + std::chrono::seconds(20);
      if (stop) {  // rank 0 sends rank 1 almost 64 MiB in one message: a stop lands inside
        s = comm->reducescatter(data.data(), out.data(), counts, DataType::kFloat32, ReduceOp::kSum,
                                deadline);
      } else {
        s = comm->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum, deadline);
      }
      ++calls;
    }
    const double late = duration<double>(Clock::now() - fire).count();
    if (stopper.joinable()) stopper.join();
    if (stop && me == 0) kill(static_cast<pid_t>(std::atol(pids[1].c_str())), SIGCONT);
    std::string problem;
    if (s.code() != ErrorCode::kPeerFailure) {
      problem = "expected a peer failure";
    } else if (me == 0 && s.message().find("the test's interrupt") == std::string::npos) {
      problem = "the message does not quote the interrupt";
    } else if (me != 0 && s.message().find("rank 0") == std::string::npos) {
      problem = "the message does not name rank 0";
    } else if (late > kLimit && !(stop && me == 1)) {
      problem = "failed " + std::to_string(late) + " s after the interrupt (limit " +
                std::to_string(kLimit) + " s)";
    }
    if (!problem.empty()) ++failures;
    std::printf(
        "%s [rank %d] cut-test attempt %d: failed %.3f s after the interrupt, after %d "
        "calls: %s%s%s\n",
        problem.empty() ? "PASS" : "FAIL", me, attempt, late, calls, s.to_string().c_str(),
        problem.empty() ? "" : " -- ", problem.c_str());
    std::fflush(stdout);
    if (!world->barrier(collective_check::soon()).ok()) {
      std::printf("FAIL [rank %d] cut-test: the world's barrier after attempt %d failed\n", me,
                  attempt);
      return 1;
    }
  }
  return failures == 0 ? 0 : 1;
}

int run(int argc, char** argv) {
  bool kill_test = false, bench = false, cut_test = false, stop = false;
  int victim = -1;
  std::string kill_op = "and";
  collective_check::KillExpect expect;  // gloo sees a peer's sockets close: fast, named
  expect.min_seconds = 0;
  expect.max_seconds = 4.0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--kill-test") {
      kill_test = true;
    } else if (arg == "--kill-rank" && i + 1 < argc) {
      victim = std::atoi(argv[++i]);
    } else if (arg == "--kill-op" && i + 1 < argc) {
      kill_op = argv[++i];
    } else if (arg == "--sigkill") {
      expect.victim_sigkill = true;
    } else if (arg == "--bench") {
      bench = true;
    } else if (arg == "--cut-test") {
      cut_test = true;
    } else if (arg == "--stop") {
      stop = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--bench | --cut-test [--stop] | --kill-test [--kill-rank R] "
                   "[--kill-op and|gather|allreduce] [--sigkill]]\n",
                   argv[0]);
      return 2;
    }
  }
  check::CheckJob job;
  Status s = check::open_check_job(&job);
  const TransportFactory* gloo = find_transport("gloo");  // whatever KOLO_TRANSPORT says
  if (s.ok() && gloo == nullptr) s = Internal("this build has no gloo transport");
  std::unique_ptr<Communicator> comm;
  if (s.ok()) s = gloo->create(job.context, &comm);  // the base alone, no shm layer
  if (!s.ok()) {
    std::printf("FAIL [rank %d] creating the gloo communicator: %s\n", job.launch.rank,
                s.to_string().c_str());
    return 1;
  }
  const Topology& t = comm->topology();
  if (t.rank == 0) {
    std::printf("kolo_gloo_check: %d ranks, local_size %d, cross_size %d\n", t.size, t.local_size,
                t.cross_size);
  }
  if (bench) {
    run_bench(comm.get());
    return 0;
  }
  if (cut_test) return run_cut_test(comm.get(), stop);
  if (kill_test) {
    return collective_check::run_kill_test(comm.get(), victim < 0 ? t.size - 1 : victim, kill_op,
                                           expect);
  }
  const int rc = collective_check::run_checks(comm.get(), "kolo_gloo_check");
  return run_ring_checks(comm.get()) != 0 ? 1 : rc;
}

}  // namespace
}  // namespace kolo::transport

int main(int argc, char** argv) { return kolo::transport::run(argc, argv); }
