// The transport-agnostic correctness cases of the transport check programs
// (kolo_mpi_check, kolo_gloo_check): every collective for every dtype and every reduce op
// at the edge sizes (0, 1, 7 and 1024 elements), and past one segment (2^20 + 3) for the
// pairs check::large_case() picks, against a reference computed here from deterministic
// per-rank inputs (small integers, so every result is exact even in int8 and bfloat16),
// the control plane, and argument errors. Test code only.
#include "collective_checks.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check_harness.h"
#include "common/reduce.h"
#include "common/testing/elements.h"

namespace kolo::transport::collective_check {
namespace {

using check::Checker;
using check::fold;
using check::input;
using check::load;
using check::store;
using std::chrono::duration;

using check::kDtypes;
using check::kOps;
using check::large_case;
// The last is odd and past gloo's 1 MiB segments (and MPI's ring chunks) in every dtype.
constexpr std::size_t kLarge = (std::size_t{1} << 20) + 3;
constexpr std::size_t kSizes[] = {0, 1, 7, 1024, kLarge};

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The expected results for one input class (signed, unsigned, bool) and op, computed once
// and shared by the dtypes of the class (recomputing them per dtype would dominate the
// run), as far as the cases so far have needed them: a table grows at least twofold.
class References {
 public:
  explicit References(int size) : size_(size) {}

  std::int64_t at(std::size_t i, DataType dt, ReduceOp op) {
    const int cls = dt == DataType::kBool ? 2 : dt == DataType::kUInt8 ? 1 : 0;
    std::vector<std::int8_t>& table = tables_[cls][static_cast<int>(op)];
    if (table.size() <= i) {
      const std::size_t from = table.size();
      table.resize(std::max<std::size_t>({i + 1, 2 * from, 4096}));
      for (std::size_t k = from; k < table.size(); ++k) {
        std::int64_t v = input(0, k, dt, op);
        for (int r = 1; r < size_; ++r) v = fold(dt, op, v, input(r, k, dt, op));
        table[k] = static_cast<std::int8_t>(v);  // |v| <= 3 * size or 16: fits while size <= 42
      }
    }
    return table[i];
  }

 private:
  int size_;
  std::vector<std::int8_t> tables_[3][5];
};

std::uint8_t pattern(int a, int b, std::size_t j) {
  return static_cast<std::uint8_t>(a * 37 + b * 29 + j * 7 + 5);
}

std::string label(const char* op, DataType dt, std::size_t n) {
  return std::string(op) + " " + dtype_name(dt) + " n=" + std::to_string(n);
}

void check_allreduce(Communicator* comm, Checker* check, References* refs, DataType dt) {
  std::vector<char> buf;
  for (ReduceOp op : kOps) {
    for (std::size_t n : kSizes) {
      if (n > 1024 && !large_case(dt, op)) continue;
      const std::string what = label("allreduce", dt, n) + " " + reduce_op_name(op);
      buf.assign(n * dtype_size(dt) + 1, 0);
      for (std::size_t i = 0; i < n; ++i) store(dt, buf.data(), i, input(comm->rank(), i, dt, op));
      check->count();
      if (!check->expect_ok(comm->allreduce(buf.data(), n, dt, op, soon()), what)) continue;
      for (std::size_t i = 0; i < n; ++i) {
        const auto want = static_cast<double>(refs->at(i, dt, op));
        if (load(dt, buf.data(), i) != want) {
          check->fail(what + ": element " + std::to_string(i) + " is " +
                      std::to_string(load(dt, buf.data(), i)) + ", expected " +
                      std::to_string(want));
          break;
        }
      }
    }
  }
}

void check_reducescatter(Communicator* comm, Checker* check, References* refs, DataType dt) {
  const int size = comm->size();
  const int rank = comm->rank();
  const std::size_t esz = dtype_size(dt);
  std::vector<char> send, recv;
  for (ReduceOp op : kOps) {
    for (std::size_t n : kSizes) {
      if (n > 1024 && !large_case(dt, op)) continue;
      // Uneven blocks (odd ranks get half), including empty ones for n = 1.
      std::vector<std::size_t> counts(size);
      std::size_t total = 0, offset = 0;
      for (int r = 0; r < size; ++r) {
        counts[r] = r % 2 == 0 ? n : n / 2;
        if (r < rank) offset += counts[r];
        total += counts[r];
      }
      for (bool in_place : {false, true}) {
        if (in_place && n != 7) continue;
        const std::string what = label("reducescatter", dt, n) + " " + reduce_op_name(op) +
                                 (in_place ? " in-place" : "");
        send.assign(total * esz + 1, 0);
        for (std::size_t i = 0; i < total; ++i) store(dt, send.data(), i, input(rank, i, dt, op));
        char* out = send.data();
        if (!in_place) {
          recv.assign(counts[rank] * esz + 1, 0);
          out = recv.data();
        }
        check->count();
        if (!check->expect_ok(comm->reducescatter(send.data(), out, counts, dt, op, soon()),
                              what)) {
          continue;
        }
        for (std::size_t j = 0; j < counts[rank]; ++j) {
          const auto want = static_cast<double>(refs->at(offset + j, dt, op));
          if (load(dt, out, j) != want) {
            check->fail(what + ": element " + std::to_string(j) + " is " +
                        std::to_string(load(dt, out, j)) + ", expected " + std::to_string(want));
            break;
          }
        }
      }
    }
  }
}

void check_bytes(Checker* check, const std::string& what, const std::uint8_t* got, int a, int b,
                 std::size_t bytes) {
  for (std::size_t j = 0; j < bytes; ++j) {
    if (got[j] != pattern(a, b, j)) {
      check->fail(what + ": byte " + std::to_string(j) + " from rank " + std::to_string(a) +
                  " is " + std::to_string(got[j]) + ", expected " +
                  std::to_string(pattern(a, b, j)));
      return;
    }
  }
}

void check_byte_collectives(Communicator* comm, Checker* check, DataType dt) {
  const int size = comm->size();
  const int rank = comm->rank();
  const std::size_t esz = dtype_size(dt);
  for (std::size_t n : kSizes) {
    if (n > 1024 && !check::first_of_its_size(dt)) continue;
    // allgatherv: rank r contributes n (even r) or n/2 (odd r) elements.
    std::vector<std::size_t> recv_bytes(size);
    std::size_t total = 0;
    for (int r = 0; r < size; ++r) total += recv_bytes[r] = (r % 2 == 0 ? n : n / 2) * esz;
    std::vector<std::uint8_t> send(recv_bytes[rank] + 1), recv(total + 1, 0xee);
    for (std::size_t j = 0; j < recv_bytes[rank]; ++j) send[j] = pattern(rank, 0, j);
    std::string what = label("allgatherv", dt, n);
    check->count();
    if (check->expect_ok(comm->allgatherv(send.data(), recv.data(), recv_bytes, soon()), what)) {
      std::size_t at = 0;
      for (int r = 0; r < size; ++r) {
        check_bytes(check, what, recv.data() + at, r, 0, recv_bytes[r]);
        at += recv_bytes[r];
      }
    }

    // alltoallv: rank r sends ((r + 2q) % 3) * n / 2 elements to rank q.
    auto elements = [n](int from, int to) {
      return static_cast<std::size_t>((from + 2 * to) % 3) * n / 2;
    };
    std::vector<std::size_t> send_bytes(size), recv_bytes2(size);
    std::size_t send_total = 0, recv_total = 0;
    for (int q = 0; q < size; ++q) {
      send_total += send_bytes[q] = elements(rank, q) * esz;
      recv_total += recv_bytes2[q] = elements(q, rank) * esz;
    }
    send.assign(send_total + 1, 0);
    recv.assign(recv_total + 1, 0xee);
    for (int q = 0, at = 0; q < size; at += static_cast<int>(send_bytes[q]), ++q) {
      for (std::size_t j = 0; j < send_bytes[q]; ++j) send[at + j] = pattern(rank, q, j);
    }
    what = label("alltoallv", dt, n);
    check->count();
    if (check->expect_ok(comm->alltoallv(send.data(), send_bytes, recv.data(), recv_bytes2, soon()),
                         what)) {
      std::size_t at = 0;
      for (int r = 0; r < size; ++r) {
        check_bytes(check, what, recv.data() + at, r, rank, recv_bytes2[r]);
        at += recv_bytes2[r];
      }
    }

    // broadcast from the first and the last rank.
    std::vector<int> roots = {0};
    if (size > 1) roots.push_back(size - 1);
    for (int root : roots) {
      const std::size_t bytes = n * esz;
      recv.assign(bytes + 1, 0xee);
      if (rank == root) {
        for (std::size_t j = 0; j < bytes; ++j) recv[j] = pattern(root, 1, j);
      }
      what = label("broadcast", dt, n) + " root=" + std::to_string(root);
      check->count();
      if (check->expect_ok(comm->broadcast(recv.data(), bytes, root, soon()), what)) {
        check_bytes(check, what, recv.data(), root, 1, bytes);
      }
    }
  }
}

// Calls that must fail locally with kInvalidArgument and leave the communicator usable.
void check_argument_errors(Communicator* comm, Checker* check) {
  const int size = comm->size();
  float x = 0;
  auto expect_invalid = [&](const Status& s, const char* what) {
    check->count();
    if (s.code() != ErrorCode::kInvalidArgument) {
      check->fail(std::string(what) + ": expected invalid argument, got " + s.to_string());
    }
  };
  expect_invalid(comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kAverage, soon()),
                 "allreduce average");
  expect_invalid(comm->broadcast(&x, 4, size, soon()), "broadcast root=size");
  expect_invalid(comm->broadcast(&x, 4, -1, soon()), "broadcast root=-1");
  expect_invalid(comm->reducescatter(&x, &x, std::vector<std::size_t>(size + 1, 0),
                                     DataType::kFloat32, ReduceOp::kSum, soon()),
                 "reducescatter with size+1 counts");
  std::vector<std::size_t> huge(size, 0);
  huge[0] = std::size_t{1} << 31;
  expect_invalid(comm->reducescatter(&x, &x, huge, DataType::kFloat32, ReduceOp::kSum, soon()),
                 "reducescatter with 2^31 elements for rank 0");
  expect_invalid(comm->allgatherv(&x, &x, huge, soon()), "allgatherv with 2^31 bytes");
  expect_invalid(comm->allgatherv(&x, &x, std::vector<std::size_t>(size + 1, 0), soon()),
                 "allgatherv with size+1 entries");
  expect_invalid(comm->alltoallv(&x, std::vector<std::size_t>(size, 0), &x,
                                 std::vector<std::size_t>(size - 1, 0), soon()),
                 "alltoallv with size-1 recv entries");
  if (comm->rank() == 0) {
    expect_invalid(comm->control_gather("x", nullptr, soon()), "control_gather without a result");
  }
  check->count();
  check->expect_ok(comm->barrier(soon()), "barrier after argument errors");
  for (int i = 0; i < 10; ++i) {
    check->count();
    check->expect_ok(comm->barrier(soon()), "barrier");
  }
}

std::uint64_t and_word(int rank, std::size_t k, int iteration) {
  return ~(mix(rank * 131 + k * 7 + iteration * 1000003ull) &
           mix(rank * 977 + k * 3 + iteration * 7919ull) & mix(k + iteration));
}

void check_control_and(Communicator* comm, Checker* check) {
  const int size = comm->size();
  auto one = [&](std::size_t n, int iteration) {
    std::vector<std::uint64_t> words(n);
    for (std::size_t k = 0; k < n; ++k) words[k] = and_word(comm->rank(), k, iteration);
    const std::string what =
        "control_and n=" + std::to_string(n) + " iteration " + std::to_string(iteration);
    check->count();
    if (!check->expect_ok(comm->control_and(words, soon()), what)) return;
    for (std::size_t k = 0; k < n; ++k) {
      std::uint64_t want = ~std::uint64_t{0};
      for (int r = 0; r < size; ++r) want &= and_word(r, k, iteration);
      if (words[k] != want) {
        check->fail(what + ": word " + std::to_string(k) + " differs");
        return;
      }
    }
  };
  for (std::size_t n : {0, 1, 3, 64, 1000}) one(n, 0);
  // Deadline::max() means no deadline and must not overflow into an instant timeout.
  std::vector<std::uint64_t> words = {1};
  std::string message = "x";
  std::vector<std::string> all;
  float x = 1;
  check->count();
  Status s = comm->control_and(words, Deadline::max());
  if (s.ok()) s = comm->control_gather(message, &all, Deadline::max());
  if (s.ok()) s = comm->control_broadcast(&message, Deadline::max());
  if (s.ok()) s = comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, Deadline::max());
  if (s.ok()) s = comm->barrier(Deadline::max());
  check->expect_ok(s, "control calls, allreduce and barrier with Deadline::max()");
  for (int i = 1; i <= 500; ++i) one(1 + i % 3, i);
}

std::string gather_message(int rank, std::size_t length, int salt) {
  std::string s(length, '\0');
  for (std::size_t j = 0; j < length; ++j) s[j] = static_cast<char>(pattern(rank, salt, j));
  return s;
}

void check_control_strings(Communicator* comm, Checker* check) {
  const int size = comm->size();
  const int rank = comm->rank();
  std::vector<std::string> all;
  // Lengths around the 504 bytes that travel inline in the first message.
  for (std::size_t base : {0, 1, 503, 504, 505, 4096, 100000}) {
    const std::size_t mine = base + rank % 2;
    const std::string what = "control_gather length " + std::to_string(base) + "+";
    check->count();
    if (!check->expect_ok(comm->control_gather(gather_message(rank, mine, 3), &all, soon()),
                          what)) {
      continue;
    }
    if (rank != 0) {
      if (!all.empty()) check->fail(what + ": a non-root rank received something");
      continue;
    }
    if (all.size() != static_cast<std::size_t>(size)) {
      check->fail(what + ": " + std::to_string(all.size()) + " messages");
      continue;
    }
    for (int r = 0; r < size; ++r) {
      if (all[r] != gather_message(r, base + r % 2, 3))
        check->fail(what + ": rank " + std::to_string(r) + "'s message differs");
    }
  }
  for (std::size_t length : {0, 1, 504, 505, 100000}) {
    std::string message = rank == 0 ? gather_message(0, length, 4) : "stale";
    const std::string what = "control_broadcast length " + std::to_string(length);
    check->count();
    if (!check->expect_ok(comm->control_broadcast(&message, soon()), what)) continue;
    if (message != gather_message(0, length, 4)) check->fail(what + ": message differs");
  }
  // Negotiation-like cycles: gather requests, broadcast the concatenation, AND a bit vector.
  for (int cycle = 0; cycle < 100; ++cycle) {
    const std::string what = "negotiation cycle " + std::to_string(cycle);
    check->count();
    Status s =
        comm->control_gather(gather_message(rank, 10 + rank + cycle % 5, cycle), &all, soon());
    std::string response;
    if (s.ok() && rank == 0) {
      for (const auto& m : all) response += m;
    }
    if (s.ok()) s = comm->control_broadcast(&response, soon());
    std::vector<std::uint64_t> bits = {and_word(rank, 0, cycle)};
    if (s.ok()) s = comm->control_and(bits, soon());
    if (!check->expect_ok(s, what)) break;
    std::string want;
    for (int r = 0; r < size; ++r) want += gather_message(r, 10 + r + cycle % 5, cycle);
    if (response != want) check->fail(what + ": broadcast response differs");
  }
}

}  // namespace

int run_checks(Communicator* comm, const char* program) {
  const auto start = Clock::now();
  const Topology& t = comm->topology();
  Checker check(comm, std::chrono::seconds(30));
  check.count();
  if (t.local_rank < 0 || t.local_rank >= t.local_size || t.cross_rank < 0 ||
      t.cross_rank >= t.cross_size || t.local_size * t.cross_size < t.size) {
    check.fail("topology is inconsistent");
  }
  check.end_group("topology");
  check_control_and(comm, &check);
  check.end_group("control_and");
  check_control_strings(comm, &check);
  check.end_group("control_gather / control_broadcast");
  check_argument_errors(comm, &check);
  check.end_group("argument errors and barrier");
  References refs(t.size);
  for (DataType dt : kDtypes) {
    check_allreduce(comm, &check, &refs, dt);
    check.end_group(std::string("allreduce ") + dtype_name(dt) + ": sum, min, max, product x n");
    check_reducescatter(comm, &check, &refs, dt);
    check.end_group(std::string("reducescatter ") + dtype_name(dt) +
                    ": sum, min, max, product x n, uneven blocks, in place at n=7");
    check_byte_collectives(comm, &check, dt);
    check.end_group(std::string("allgatherv / alltoallv / broadcast ") + dtype_name(dt) +
                    " x n, uneven, broadcast from first and last rank");
  }
  const double elapsed = duration<double>(Clock::now() - start).count();
  std::vector<std::uint64_t> ok = {check.failures() == 0 ? 1u : 0u};
  const Status s = comm->control_and(ok, soon());
  if (t.rank == 0) {
    const bool pass = s.ok() && ok[0] == 1;
    std::printf("%s: %s (%d cases per rank, %d ranks, %.1f s)\n", program,
                pass ? "ALL PASS" : "FAILED", check.total_cases(), t.size, elapsed);
  }
  return check.failures() == 0 && s.ok() ? 0 : 1;
}

}  // namespace kolo::transport::collective_check
