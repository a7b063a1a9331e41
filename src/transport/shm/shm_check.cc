// kolo_shm_check: end-to-end check of the shm transport across real processes (mpirun).
//
// Checks allreduce for every dtype x op x size (0, 1, 7, 1024, 2^20 and 3 * 2^20 + 5
// elements; with KOLO_FUSION_THRESHOLD=1048576 the large ones take several chunks)
// through the copy path, the fusion_buffer() zero-copy path and a mix of both, against a
// reference computed here from deterministic small-integer inputs (exact in every dtype);
// broadcast from every root, control_and, barrier and a delegated allgatherv.
// Prints PASS/FAIL per group; exits non-zero on any failure.
//
//   mpirun -np 3 kolo_shm_check                          correctness
//   mpirun -np 2 kolo_shm_check --select shm|mpi         the transport table's choice
//   mpirun --enable-recovery -np 3 kolo_shm_check --kill-rank 2
//   mpirun -np 2 kolo_shm_check --bench
//
// Not for: the runtime's semantics (tests/multiprocess), or running without mpirun.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/reduce.h"
#include "transport/mpi/mpi_communicator.h"
#include "transport/shm/shm_check.h"
#include "transport/shm/shm_communicator.h"
#include "transport/table.h"

namespace kolo::transport::shm_check {
namespace {

constexpr DataType kDtypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                DataType::kInt32,    DataType::kInt64,   DataType::kBool};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
constexpr std::size_t kSizes[] = {0, 1, 7, 1024, std::size_t{1} << 20, (std::size_t{3} << 20) + 5};

std::uint32_t hash(std::uint64_t x) {
  return static_cast<std::uint32_t>((x * 0x9e3779b97f4a7c15ull) >> 32);
}

// Rank r's element i: sums of -2..2, products of {-1, 1, 2} (|product| <= 16 on 4 ranks).
std::int64_t input(int rank, std::size_t i, DataType dt, ReduceOp op) {
  const std::uint32_t h = hash(i * 1000003ull + static_cast<std::uint64_t>(rank));
  if (dt == DataType::kBool) return h % 3 != 0;
  if (dt == DataType::kUInt8) return op == ReduceOp::kProduct ? 1 + h % 2 : h % 4;
  static const std::int64_t kFactors[] = {1, 2, -1};
  if (op == ReduceOp::kProduct) return kFactors[h % 3];
  return static_cast<std::int64_t>(h % 5) - 2;
}

std::int64_t fold(DataType dt, ReduceOp op, std::int64_t a, std::int64_t b) {
  if (dt == DataType::kBool)
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (a || b) : (a && b);
  switch (op) {
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return a * b;
    default:
      return a + b;
  }
}

void store(DataType dt, void* buf, std::size_t i, std::int64_t v) {
  auto put = [&](auto x) { std::memcpy(static_cast<char*>(buf) + i * sizeof x, &x, sizeof x); };
  switch (dt) {
    case DataType::kFloat32:
      return put(static_cast<float>(v));
    case DataType::kFloat64:
      return put(static_cast<double>(v));
    case DataType::kFloat16:
      return put(float_to_half(static_cast<float>(v)));
    case DataType::kBFloat16:
      return put(float_to_bfloat16(static_cast<float>(v)));
    case DataType::kInt8:
      return put(static_cast<std::int8_t>(v));
    case DataType::kUInt8:
      return put(static_cast<std::uint8_t>(v));
    case DataType::kInt32:
      return put(static_cast<std::int32_t>(v));
    case DataType::kInt64:
      return put(static_cast<std::int64_t>(v));
    case DataType::kBool:
      return put(static_cast<std::uint8_t>(v != 0));
  }
}

double load(DataType dt, const void* buf, std::size_t i) {
  auto get = [&](auto x) {
    std::memcpy(&x, static_cast<const char*>(buf) + i * sizeof x, sizeof x);
    return x;
  };
  switch (dt) {
    case DataType::kFloat32:
      return get(float{});
    case DataType::kFloat64:
      return get(double{});
    case DataType::kFloat16:
      return half_to_float(get(std::uint16_t{}));
    case DataType::kBFloat16:
      return bfloat16_to_float(get(std::uint16_t{}));
    case DataType::kInt8:
      return get(std::int8_t{});
    case DataType::kUInt8:
      return get(std::uint8_t{});
    case DataType::kInt32:
      return get(std::int32_t{});
    case DataType::kInt64:
      return static_cast<double>(get(std::int64_t{}));
    case DataType::kBool:
      return get(std::uint8_t{});
  }
  return 0;
}

class Checker {
 public:
  explicit Checker(Communicator* comm) : comm_(comm) {}
  void fail(const std::string& what) {
    ++failures_;
    ok_ = false;
    if (failures_ <= 20) std::printf("FAIL [rank %d] %s\n", comm_->rank(), what.c_str());
    std::fflush(stdout);
  }
  bool expect_ok(const Status& s, const std::string& what) {
    if (!s.ok()) fail(what + ": " + s.to_string());
    return s.ok();
  }
  void count() { ++cases_; }
  // Every rank's verdict is ANDed (through the communicator under test); rank 0 prints.
  void end_group(const char* name) {
    std::vector<std::uint64_t> ok = {ok_ ? 1u : 0u};
    if (!comm_->control_and(ok, soon()).ok()) fail(std::string(name) + ": verdict exchange failed");
    if (comm_->rank() == 0)
      std::printf("%s %s (%d cases)\n", ok[0] ? "PASS" : "FAIL", name, cases_);
    std::fflush(stdout);
    ok_ = true;
    cases_ = 0;
  }
  int failures() const { return failures_; }

 private:
  Communicator* comm_;
  bool ok_ = true;
  int cases_ = 0;
  int failures_ = 0;
};

// path 0: copy; 1: zero-copy (fusion_buffer); 2: zero-copy on even ranks only.
void check_allreduce(Communicator* comm, Checker& c) {
  const int n = comm->size(), me = comm->rank();
  std::vector<std::int64_t> want;
  for (DataType dt : kDtypes) {
    for (ReduceOp op : kOps) {
      for (std::size_t count : kSizes) {
        const std::size_t bytes = count * dtype_size(dt);
        want.resize(count);
        for (std::size_t i = 0; i < count; ++i) {
          std::int64_t v = input(0, i, dt, op);
          for (int r = 1; r < n; ++r) v = fold(dt, op, v, input(r, i, dt, op));
          want[i] = v;
        }
        for (int path = 0; path < 3; ++path) {
          void* region = comm->fusion_buffer(bytes);
          const bool zero_copy = path == 1 || (path == 2 && me % 2 == 0);
          if (path > 0 && region == nullptr) continue;
          std::vector<char> own(zero_copy ? 0 : bytes);
          void* buf = zero_copy ? region : own.data();
          for (std::size_t i = 0; i < count; ++i) store(dt, buf, i, input(me, i, dt, op));
          const std::string what = std::string("allreduce ") + dtype_name(dt) + " " +
                                   reduce_op_name(op) + " count " + std::to_string(count) +
                                   " path " + std::to_string(path);
          c.count();
          if (!c.expect_ok(comm->allreduce(buf, count, dt, op, soon()), what)) return;
          for (std::size_t i = 0; i < count; ++i) {
            if (load(dt, buf, i) != static_cast<double>(want[i])) {
              c.fail(what + ": element " + std::to_string(i) + " is " +
                     std::to_string(load(dt, buf, i)) + ", want " + std::to_string(want[i]));
              break;
            }
          }
        }
      }
    }
  }
}

void check_others(Communicator* comm, Checker& c) {
  const int n = comm->size(), me = comm->rank();
  for (std::size_t bytes :
       {std::size_t{0}, std::size_t{1}, std::size_t{5000}, (std::size_t{3} << 20) + 7}) {
    for (int root = 0; root < n; ++root) {
      std::vector<std::uint8_t> buf(bytes);
      for (std::size_t i = 0; i < bytes; ++i)
        buf[i] = me == root ? static_cast<std::uint8_t>(i * 7 + root) : 0;
      c.count();
      if (!c.expect_ok(comm->broadcast(buf.data(), bytes, root, soon()), "broadcast")) return;
      for (std::size_t i = 0; i < bytes; ++i) {
        if (buf[i] != static_cast<std::uint8_t>(i * 7 + root)) {
          c.fail("broadcast from " + std::to_string(root) + " of " + std::to_string(bytes) +
                 " bytes: byte " + std::to_string(i));
          break;
        }
      }
    }
  }
  for (int call = 0; call < 300; ++call) {
    const std::size_t words_n = call % 3 == 0 ? 1 : call % 3 == 1 ? 17 : 600;
    std::vector<std::uint64_t> w(words_n);
    for (std::size_t i = 0; i < words_n; ++i) w[i] = ~(std::uint64_t{1} << ((i + call + me) % 64));
    c.count();
    if (!c.expect_ok(comm->control_and(w, soon()), "control_and")) return;
    for (std::size_t i = 0; i < words_n; ++i) {
      std::uint64_t want = ~std::uint64_t{0};
      for (int r = 0; r < n; ++r) want &= ~(std::uint64_t{1} << ((i + call + r) % 64));
      if (w[i] != want) {
        c.fail("control_and call " + std::to_string(call) + " word " + std::to_string(i));
        break;
      }
    }
    if (call % 50 == 0) c.expect_ok(comm->barrier(soon()), "barrier");
  }
  std::vector<std::int32_t> mine(me + 1, me), all(n * (n + 1) / 2);
  std::vector<std::size_t> sizes;
  for (int r = 0; r < n; ++r) sizes.push_back((r + 1) * sizeof(std::int32_t));
  c.count();
  if (c.expect_ok(comm->allgatherv(mine.data(), all.data(), sizes, soon()), "allgatherv")) {
    std::size_t k = 0;
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j <= r; ++j, ++k) {
        if (all[k] != r) c.fail("allgatherv value");
      }
    }
  }
}

int run_select(const std::string& expect) {
  const TransportFactory* t = find_transport("mpi");
  std::unique_ptr<Communicator> comm;
  const Status s = t ? t->create(&comm) : Internal("no mpi transport in this build");
  if (!s.ok()) {
    std::printf("FAIL select: %s\n", s.to_string().c_str());
    return 1;
  }
  const bool ok = expect == comm->name();
  std::printf("%s [rank %d] select: the transport table chose %s (expected %s)\n",
              ok ? "PASS" : "FAIL", comm->rank(), comm->name(), expect.c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kolo::transport::shm_check

int main(int argc, char** argv) {
  using namespace kolo;
  using namespace kolo::transport;
  std::string mode = "check", arg;
  if (argc > 2)
    mode = argv[1], arg = argv[2];
  else if (argc > 1)
    mode = argv[1];
  if (mode == "--select") return shm_check::run_select(arg);

  std::unique_ptr<Communicator> comm;
  Status s = create_mpi_communicator(&comm);
  if (s.ok()) s = wrap_in_shm(comm, shm_options_from_env());
  if (!s.ok()) {
    std::printf("FAIL setup: %s\n", s.to_string().c_str());
    return 1;
  }
  if (mode == "--kill-rank") return shm_check::run_kill_test(comm.get(), std::stoi(arg));
  if (mode == "--bench") {
    shm_check::run_bench(comm.get());
    return 0;
  }
  shm_check::Checker c(comm.get());
  shm_check::check_allreduce(comm.get(), c);
  c.end_group("shm allreduce: every dtype x op x size, copy / zero-copy / mixed paths");
  shm_check::check_others(comm.get(), c);
  c.end_group("shm broadcast, control_and, barrier, allgatherv");
  return c.failures() ? 1 : 0;
}
