// kolo_ipc_check: the device layer's CUDA-IPC path (src/device/ipc/) across real
// processes, started by kolorun's own launcher with 2-4 ranks that share one device: the
// host stand-in playing one GPU (the default; its shared memory and events are POSIX
// shared memory, so this runs in CI), or with --device cuda GPU 0 of a GPU machine, where
// NCCL would refuse the ranks ("Duplicate GPU detected").
//
// The ranks connect with device::connect_collectives() over the job's base communicator
// (check_job.h: Gloo under kolorun, MPI under mpirun), which finds that they share a
// device and takes the IPC path, then run every collective against references computed here:
// allreduce of every dtype and op (in and out of place), broadcast from every root, uneven
// allgatherv, reducescatter and uneven alltoallv, at sizes that take many chunks of the regions
// (--half bytes, default 4 KiB). Prints PASS/FAIL per group; exits non-zero on any failure. --bench
// times allreduces of 4 KiB..64 MiB of float32 and prints the bus bandwidth.
//
// --kill-test --kill-rank R: after a warm-up, rank R SIGKILLs itself while the others are
// in a chunked allreduce; they must fail within 5 s with kPeerFailure naming rank R, and
// every later call must fail at once. With --stop rank R SIGSTOPs itself instead: the
// others must fail at the peer timeout (--timeout, 2 s here) naming it, then kill it.
//
// With --device host_hier (4 ranks) the stand-ins pretend two hosts (rank r on host r % 2),
// host-mates sharing one "GPU": the hierarchical collectives (src/device/hier/), the IPC
// path inside each host and the job's CPU transport across, checked the same way.
//
//   kolorun -np 3 kolo_ipc_check [--device host|host_hier|cuda] [--half BYTES] [--bench]
//   mpirun -np 2 kolo_ipc_check --device cuda
//   kolorun -np 3 kolo_ipc_check --kill-test --kill-rank 1 [--stop]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check_harness.h"
#include "check_job.h"
#include "collective_checks.h"
#include "device/device.h"
#include "device/testing/test_devices.h"

namespace kolo::device {
namespace {

using std::chrono::duration;
using transport::Communicator;
using transport::check::Checker;

struct Rank {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Collectives> comm;

  // Waits for the stream's work so far.
  Status finish(double seconds = 30) {
    std::unique_ptr<Event> done;
    KOLO_RETURN_IF_ERROR(dev->create_event(&done));
    KOLO_RETURN_IF_ERROR(dev->record(*done, *stream));
    return dev->synchronize(*done, deadline_after(seconds));
  }
};

// Device memory of `bytes` bytes, filled from `host` when given.
class Buffer {
 public:
  Buffer(Rank& r, std::size_t bytes, const void* host = nullptr) : r_(r), bytes_(bytes) {
    status_ = r_.dev->allocate(bytes, &ptr_);
    if (status_.ok() && host != nullptr && bytes > 0) {
      status_ = r_.dev->copy(ptr_, host, bytes, *r_.stream);
    }
  }
  ~Buffer() {
    if (ptr_ != nullptr) {
      (void)r_.finish();
      r_.dev->release(ptr_);
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }
  const Status& status() const { return status_; }
  // The memory's bytes, once the stream's work so far has finished.
  Status read(std::vector<unsigned char>* out) {
    out->assign(bytes_, 0);
    if (bytes_ > 0) KOLO_RETURN_IF_ERROR(r_.dev->copy(out->data(), ptr_, bytes_, *r_.stream));
    return r_.finish();
  }

 private:
  Rank& r_;
  std::size_t bytes_;
  void* ptr_ = nullptr;
  Status status_;
};

std::string dtype_op(DataType dt, ReduceOp op, std::size_t count) {
  return std::string(dtype_name(dt)) + " " + reduce_op_name(op) + " x" + std::to_string(count);
}

// Allreduce of every dtype and op, out of place and in place, against the reference fold
// (averages: the sum divided by the rank count, truncated for integers, rounded in the
// dtype for floats).
void check_allreduce(Rank& r, Checker& check, int size) {
  const int me = r.comm->rank();
  for (DataType dt : transport::check::kDtypes) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      if (dt == DataType::kBool && op == ReduceOp::kAverage) continue;
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1024},
                                std::size_t{70001}}) {
        check.count();
        const ReduceOp in_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
        const std::size_t bytes = count * dtype_size(dt);
        std::vector<unsigned char> host(bytes), got, got_in_place;
        for (std::size_t i = 0; i < count; ++i) {
          transport::check::store(dt, host.data(), i, transport::check::input(me, i, dt, in_op));
        }
        Buffer send(r, bytes, host.data()), recv(r, bytes);
        const std::string what = "allreduce " + dtype_op(dt, op, count);
        if (!check.expect_ok(send.status(), what) || !check.expect_ok(recv.status(), what)) {
          continue;
        }
        if (!check.expect_ok(r.comm->allreduce(send.get(), recv.get(), count, dt, op, *r.stream),
                             what) ||
            !check.expect_ok(r.comm->allreduce(send.get(), send.get(), count, dt, op, *r.stream),
                             what + " in place") ||
            !check.expect_ok(recv.read(&got), what) ||
            !check.expect_ok(send.read(&got_in_place), what)) {
          continue;
        }
        for (std::size_t i = 0; i < count; ++i) {
          std::int64_t acc = transport::check::input(0, i, dt, in_op);
          for (int q = 1; q < size; ++q) {
            acc = transport::check::fold(dt, in_op, acc, transport::check::input(q, i, dt, in_op));
          }
          double want = static_cast<double>(acc);
          const bool floating = dt == DataType::kFloat32 || dt == DataType::kFloat64 ||
                                dt == DataType::kFloat16 || dt == DataType::kBFloat16;
          if (op == ReduceOp::kAverage) {
            // Rounded into the dtype the way the device stores it.
            if (floating) {
              const double exact = want / size;
              if (dt == DataType::kFloat64) {
                want = exact;
              } else if (dt == DataType::kFloat32) {
                want = static_cast<float>(exact);
              } else if (dt == DataType::kFloat16) {
                want = half_to_float(float_to_half(static_cast<float>(exact)));
              } else {
                want = bfloat16_to_float(float_to_bfloat16(static_cast<float>(exact)));
              }
            } else {
              want = static_cast<double>(acc / size);  // truncates toward zero
            }
          }
          const double a = transport::check::load(dt, got.data(), i);
          const double b = transport::check::load(dt, got_in_place.data(), i);
          const double tol = op == ReduceOp::kAverage && floating ? 1e-2 * std::abs(want) : 0;
          if (std::abs(a - want) > tol || std::abs(b - want) > tol) {
            check.fail(what + " element " + std::to_string(i) + ": got " + std::to_string(a) +
                       " and in place " + std::to_string(b) + ", expected " + std::to_string(want));
            break;
          }
        }
      }
    }
  }
  check.end_group("ipc allreduce: every dtype and op, in and out of place, 0..70001 elements");
}

// Broadcast from every root, allgatherv with uneven parts, reducescatter (sum and average)
// and alltoallv with uneven blocks, each past one half of a region.
void check_byte_collectives(Rank& r, Checker& check, int size) {
  const int me = r.comm->rank();
  auto byte = [](int from, std::size_t i, int salt) {
    return static_cast<unsigned char>((from * 131 + i * 7 + static_cast<std::size_t>(salt)) % 251);
  };
  for (int root = 0; root < size; ++root) {
    for (std::size_t bytes : {std::size_t{0}, std::size_t{5}, std::size_t{100003}}) {
      check.count();
      std::vector<unsigned char> host(bytes), got;
      for (std::size_t i = 0; i < bytes; ++i) host[i] = byte(me, i, 1);
      Buffer send(r, bytes, host.data()), recv(r, bytes);
      const std::string what =
          "broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root);
      if (!check.expect_ok(r.comm->broadcast(send.get(), recv.get(), bytes, root, *r.stream),
                           what) ||
          !check.expect_ok(recv.read(&got), what)) {
        continue;
      }
      for (std::size_t i = 0; i < bytes; ++i) {
        if (got[i] != byte(root, i, 1)) {
          check.fail(what + ": byte " + std::to_string(i) + " differs");
          break;
        }
      }
    }
  }
  check.end_group("ipc broadcast from every root");

  {
    check.count();
    std::vector<std::size_t> parts;
    std::size_t total = 0;
    for (int q = 0; q < size; ++q) {
      parts.push_back(static_cast<std::size_t>(q + 1) * 10007);
      total += parts.back();
    }
    std::vector<unsigned char> host(parts[static_cast<std::size_t>(me)]), got;
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = byte(me, i, 2);
    Buffer send(r, host.size(), host.data()), recv(r, total);
    if (check.expect_ok(r.comm->allgatherv(send.get(), recv.get(), parts, *r.stream),
                        "allgatherv") &&
        check.expect_ok(recv.read(&got), "allgatherv")) {
      std::size_t at = 0;
      for (int q = 0; q < size; ++q) {
        for (std::size_t i = 0; i < parts[static_cast<std::size_t>(q)]; ++i, ++at) {
          if (got[at] != byte(q, i, 2)) {
            check.fail("allgatherv: rank " + std::to_string(q) + "'s byte " + std::to_string(i));
            q = size;
            break;
          }
        }
      }
    }
  }
  check.end_group("ipc allgatherv, uneven parts");

  for (DataType dt : {DataType::kFloat32, DataType::kInt32, DataType::kFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
      check.count();
      const std::size_t block = 3001, es = dtype_size(dt);
      const ReduceOp in_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
      std::vector<unsigned char> host(block * static_cast<std::size_t>(size) * es), got;
      for (std::size_t i = 0; i < block * static_cast<std::size_t>(size); ++i) {
        transport::check::store(dt, host.data(), i, transport::check::input(me, i, dt, in_op));
      }
      Buffer send(r, host.size(), host.data()), recv(r, block * es);
      const std::string what = "reducescatter " + dtype_op(dt, op, block);
      if (!check.expect_ok(r.comm->reducescatter(send.get(), recv.get(), block, dt, op, *r.stream),
                           what) ||
          !check.expect_ok(recv.read(&got), what)) {
        continue;
      }
      for (std::size_t i = 0; i < block; ++i) {
        const std::size_t e = static_cast<std::size_t>(me) * block + i;
        std::int64_t acc = transport::check::input(0, e, dt, in_op);
        for (int q = 1; q < size; ++q) {
          acc = transport::check::fold(dt, in_op, acc, transport::check::input(q, e, dt, in_op));
        }
        double want = static_cast<double>(acc);
        if (op == ReduceOp::kAverage) {
          want = dt == DataType::kInt32 ? static_cast<double>(acc / size) : want / size;
        }
        const double a = transport::check::load(dt, got.data(), i);
        if (std::abs(a - want) > 1e-2 * std::abs(want)) {
          check.fail(what + " element " + std::to_string(i) + ": got " + std::to_string(a) +
                     ", expected " + std::to_string(want));
          break;
        }
      }
    }
  }
  check.end_group("ipc reducescatter: float32, int32, float16 x sum, average, max");

  {
    check.count();
    auto block_bytes = [](int from, int to) {
      return static_cast<std::size_t>(from + 2 * to) * 1009 + static_cast<std::size_t>(to);
    };
    std::vector<std::size_t> sb, rb;
    std::size_t send_total = 0, recv_total = 0;
    for (int q = 0; q < size; ++q) {
      sb.push_back(block_bytes(me, q));
      rb.push_back(block_bytes(q, me));
      send_total += sb.back();
      recv_total += rb.back();
    }
    std::vector<unsigned char> host, got;
    for (int q = 0; q < size; ++q) {
      for (std::size_t i = 0; i < sb[static_cast<std::size_t>(q)]; ++i) {
        host.push_back(byte(me, i, 3 + q));
      }
    }
    Buffer send(r, send_total, host.data()), recv(r, recv_total);
    if (check.expect_ok(r.comm->alltoallv(send.get(), sb, recv.get(), rb, *r.stream),
                        "alltoallv") &&
        check.expect_ok(recv.read(&got), "alltoallv")) {
      std::size_t at = 0;
      for (int q = 0; q < size; ++q) {
        for (std::size_t i = 0; i < rb[static_cast<std::size_t>(q)]; ++i, ++at) {
          if (got[at] != byte(q, i, 3 + me)) {
            check.fail("alltoallv: byte " + std::to_string(i) + " from rank " + std::to_string(q));
            q = size;
            break;
          }
        }
      }
    }
  }
  check.end_group("ipc alltoallv, uneven blocks");
}

// --bench: the median of 10 timed allreduces (after 2 warm-ups) per size, each timed
// to the stream's completion, as bus bandwidth (NCCL's: 2 (n - 1) / n bytes per byte).
void run_bench(Rank& r, Communicator& control) {
  const int n = r.comm->size();
  for (std::size_t bytes = 4096; bytes <= (std::size_t{64} << 20); bytes *= 4) {
    const std::size_t count = bytes / 4;
    std::vector<float> host(count, 1.0f);
    Buffer buf(r, bytes, host.data());
    std::vector<double> times;
    for (int i = 0; i < 12; ++i) {
      if (!control.barrier(transport::collective_check::soon()).ok()) return;
      const auto start = Clock::now();
      Status s = r.comm->allreduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum,
                                   *r.stream);
      if (s.ok()) s = r.finish();
      if (!s.ok()) {
        std::printf("FAIL [rank %d] bench: %s\n", r.comm->rank(), s.to_string().c_str());
        return;
      }
      if (i >= 2) times.push_back(duration<double>(Clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    if (r.comm->rank() == 0) {
      std::printf("bench: ipc allreduce %d ranks %10zu bytes: %9.1f us, bus bandwidth %.2f GB/s\n",
                  n, bytes, t * 1e6, 2.0 * (n - 1) / n * static_cast<double>(bytes) / t / 1e9);
      std::fflush(stdout);
    }
  }
}

// --kill-test: see the file's comment.
int run_kill_test(Rank& r, Communicator& control, int victim, bool stop) {
  const int me = r.comm->rank();
  // Every rank's pid, so that a survivor can end a stopped victim.
  std::vector<std::string> pids;
  std::string victim_pid = std::to_string(getpid());
  Status s = control.control_gather(victim_pid, &pids, transport::collective_check::soon());
  if (s.ok()) {
    if (me == 0) victim_pid = pids[static_cast<std::size_t>(victim)];
    s = control.control_broadcast(&victim_pid, transport::collective_check::soon());
  }
  const std::size_t count = std::size_t{1} << 20;  // 4 MiB: many chunks
  std::vector<float> host(count, 1.0f);
  Buffer buf(r, count * 4, host.data());
  if (s.ok()) {
    s = r.comm->allreduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum,
                          *r.stream);
  }
  if (s.ok()) s = r.finish();
  if (s.ok()) s = control.barrier(transport::collective_check::soon());
  if (!s.ok()) {
    std::printf("FAIL [rank %d] ipc kill-test setup: %s\n", me, s.to_string().c_str());
    return 1;
  }
  if (me == victim) {
    std::printf("kill-test: rank %d %s\n", me, stop ? "stops (SIGSTOP)" : "kills itself (SIGKILL)");
    std::fflush(stdout);
    kill(getpid(), stop ? SIGSTOP : SIGKILL);
    _exit(0);  // not reached
  }
  const auto start = Clock::now();
  for (int i = 0; i < 100 && s.ok(); ++i) {
    s = r.comm->allreduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum,
                          *r.stream);
  }
  const double elapsed = duration<double>(Clock::now() - start).count();
  const auto again_start = Clock::now();
  const Status again =
      r.comm->allreduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum, *r.stream);
  const double again_elapsed = duration<double>(Clock::now() - again_start).count();
  const double min_seconds = stop ? 1.5 : 0, max_seconds = stop ? 8 : 5;
  std::string problem;
  if (s.code() != ErrorCode::kPeerFailure) {
    problem = "expected a peer failure";
  } else if (!transport::check::names_dead_rank(s.message(), victim)) {
    problem = "the message does not name rank " + std::to_string(victim);
  } else if (elapsed < min_seconds || elapsed > max_seconds) {
    problem = "took " + std::to_string(elapsed) + " s, expected " + std::to_string(min_seconds) +
              "-" + std::to_string(max_seconds) + " s";
  } else if (again.code() != ErrorCode::kPeerFailure || again_elapsed > 0.01 ||
             r.comm->async_error().ok()) {
    problem = "the next call did not fail at once, or async_error() is OK";
  }
  std::printf("%s [rank %d] ipc kill-test (rank %d %s): %.2f s: %s%s%s\n",
              problem.empty() ? "PASS" : "FAIL", me, victim, stop ? "stopped" : "gone", elapsed,
              s.to_string().c_str(), problem.empty() ? "" : " -- ", problem.c_str());
  std::fflush(stdout);
  if (stop && me == (victim == 0 ? 1 : 0)) kill(std::atoi(victim_pid.c_str()), SIGKILL);
  return problem.empty() ? 0 : 1;
}

int run(int argc, char** argv) {
  std::string kind = "host_ipc";
  std::size_t half = 4096;
  bool bench = false, kill_test = false, stop = false;
  int victim = -1;
  double timeout = 30;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) {
      kind = argv[++i];
      if (kind == "host") kind = "host_ipc";
    } else if (arg == "--half" && i + 1 < argc) {
      half = static_cast<std::size_t>(std::atoll(argv[++i]));
    } else if (arg == "--bench") {
      bench = true;
    } else if (arg == "--kill-test") {
      kill_test = true;
    } else if (arg == "--kill-rank" && i + 1 < argc) {
      victim = std::atoi(argv[++i]);
    } else if (arg == "--stop") {
      stop = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--device host|cuda] [--half BYTES] [--bench | --kill-test "
                   "[--kill-rank R] [--stop]]\n",
                   argv[0]);
      return 2;
    }
  }
  if (kill_test && stop) timeout = 2;
  transport::check::CheckJob job;
  Status s = transport::check::open_check_job(&job);
  std::unique_ptr<Communicator> control;  // the job's base transport, no layers
  if (s.ok()) s = job.factory->create(job.context, &control);
  Rank r;
  const testing::TestDevice* device = nullptr;
  const std::vector<testing::TestDevice> devices = testing::test_devices();
  for (const auto& d : devices) {
    if (d.kind == kind) device = &d;
  }
  if (s.ok() && device == nullptr) {
    s = InvalidArgument("this build has no device kind \"" + kind +
                        "\" (host, or cuda with KOLO_CUDA)");
  }
  const int rank = job.launch.rank;
  if (s.ok()) s = device->make(rank, timeout, nullptr, &r.dev);
  if (s.ok()) s = r.dev->create_stream(&r.stream);
  if (s.ok()) {
    s = connect_collectives(*r.dev, *control, transport::collective_check::soon(), &r.comm,
                            {.ipc_half_bytes = half, .ipc_timeout_seconds = timeout});
  }
  if (!s.ok()) {
    std::printf("FAIL [rank %d] connecting the CUDA-IPC collectives: %s\n", rank,
                s.to_string().c_str());
    return 1;
  }
  const int size = r.comm->size();
  if (rank == 0) {
    std::printf("kolo_ipc_check: %d ranks, device kind %s, regions of 2 x %zu bytes\n", size,
                kind.c_str(), half);
  }
  if (bench) {
    run_bench(r, *control);
    return 0;
  }
  if (kill_test) return run_kill_test(r, *control, victim < 0 ? size - 1 : victim, stop);
  Checker check(control.get(), std::chrono::seconds(60));
  check_allreduce(r, check, size);
  check_byte_collectives(r, check, size);
  if (rank == 0) {
    std::printf("kolo_ipc_check: %s (%d cases)\n", check.failures() == 0 ? "ALL PASS" : "FAILED",
                check.total_cases());
  }
  return check.failures() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kolo::device

int main(int argc, char** argv) { return kolo::device::run(argc, argv); }
