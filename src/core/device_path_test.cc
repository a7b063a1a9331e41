// The runtime's device path (device_path.h) over the device layer's host stand-in: device
// tensors (DeviceKind::kCUDA, not staged on the host) of every collective run
// through the device's collectives with the CPU path's tensor semantics, 2-3 ranks as
// threads. The stand-in's "device memory" is host memory, so the test reads it directly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "common/reduce.h"
#include "common/shape.h"
#include "core/ops.h"
#include "core/runtime.h"
#include "core/testing/ranks.h"
#include "device/host/host_device.h"
#include "device/host/host_stream.h"

namespace kolo::core {
namespace {

using testing::test_config;
using testing::view_of;

TensorView on_device(TensorView v) {
  v.device = DeviceKind::kCUDA;
  return v;
}

// What a caller's stream does before it reads a device output: wait for the handle's
// device event (the stand-in's native event is its HostEvent). The device work's status.
Status device_done(const Handle& h) {
  h.wait();
  void* native = h.device_event();
  if (native == nullptr) return Status::OK();
  auto marker = static_cast<device::host::HostEvent*>(native)->latest();
  return marker ? marker->wait_until(deadline_after(20), "the test's wait") : Status::OK();
}

void expect_done(const Handle& h) {
  const Status s = device_done(h);
  EXPECT_TRUE(s.ok()) << s.message();
}

// While set (SharedGpu), the stand-ins of run_device_ranks all play this one GPU, so
// that the runtimes' device collectives take the CUDA-IPC path (device/ipc/).
std::string shared_gpu;  // NOLINT: the tests' own setting, one test at a time
struct SharedGpu {
  SharedGpu() { shared_gpu = "one test gpu"; }
  ~SharedGpu() { shared_gpu.clear(); }
};
// While set (HostPerRank), each stand-in is on a host of its own and the runtimes run
// with KOLO_HIERARCHICAL=1: their device collectives are the hierarchical ones
// (device/hier/), the stand-in's CPU transport across the hosts.
bool host_per_rank = false;  // NOLINT: as shared_gpu
struct HostPerRank {
  HostPerRank() { host_per_rank = true; }
  ~HostPerRank() { host_per_rank = false; }
};

// run_ranks with a stand-in device for each runtime (all of them joined by one in-process
// fabric). `fabric_out`: the fabric, for fault injection; `device_timeout`: the stand-in's
// bound.
void run_device_ranks(int n, const std::function<void(int, Runtime&)>& fn,
                      int* devices_made = nullptr, device::host::InprocFabric* fabric_out = nullptr,
                      double device_timeout = 20, std::vector<int>* indices = nullptr,
                      double peer_timeout = 20) {
  device::host::InprocFabric own;
  device::host::InprocFabric& fabric = fabric_out ? *fabric_out : own;
  std::atomic<int> made{0};
  Config config = test_config();
  config.peer_timeout_seconds = peer_timeout;
  if (host_per_rank) config.hierarchical = "1";
  testing::run_ranks(n, config, fn, 0, nullptr, [&](int r, Runtime& rt) {
    rt.set_device_factory([&, r](int index, std::unique_ptr<device::Device>* out) {
      ++made;
      if (indices) (*indices)[static_cast<std::size_t>(r)] = index;
      *out = device::host::make_host_device(
          {.index = r,
           .timeout_seconds = device_timeout,
           .connect = fabric.connector(),
           .shared_id = shared_gpu,
           .host = host_per_rank ? "pretend host " + std::to_string(r) : std::string()});
      return Status::OK();
    });
  });
  if (devices_made) *devices_made = made;
}

// Sums, averages with pre- and postscale, and float16 compression of several tensors
// submitted at once (one fused group on the device), against the same on the CPU path.
void fused_allreduces() {
  const int n = 3;
  int made = 0;
  run_device_ranks(
      n,
      [&](int rank, Runtime& rt) {
        std::vector<std::vector<float>> dev(4), cpu(4);
        for (int t = 0; t < 4; ++t) {
          for (int i = 0; i < 50 + t; ++i) {
            const float v = static_cast<float>((rank + 1) * (i % 7) + t) * 0.5f;
            dev[t].push_back(v);
            cpu[t].push_back(v);
          }
        }
        const AllreduceOptions opts[4] = {
            {.name = "sum", .op = ReduceOp::kSum},
            {.name = "avg",
             .op = ReduceOp::kAverage,
             .prescale_factor = 2.0,
             .postscale_factor = 0.25},
            {.name = "fp16", .op = ReduceOp::kSum, .compression = Compression::kFP16},
            {.name = "max", .op = ReduceOp::kMax},
        };
        rt.hold_requests(true);  // one cycle: the device ones fuse where they are compatible
        std::vector<Handle> handles;
        for (int t = 0; t < 4; ++t) {
          AllreduceOptions o = opts[t];
          TensorView v = on_device(view_of(dev[t], DataType::kFloat32));
          handles.push_back(ops::allreduce(rt, {v}, {v}, o, false));
          o.name = "cpu." + o.name;
          TensorView c = view_of(cpu[t], DataType::kFloat32);
          handles.push_back(ops::allreduce(rt, {c}, {c}, o, false));
        }
        rt.hold_requests(false);
        for (auto& h : handles) expect_done(h);
        for (int t = 0; t < 4; ++t) {
          for (std::size_t i = 0; i < dev[t].size(); ++i) {
            ASSERT_EQ(dev[t][i], cpu[t][i]) << opts[t].name << " element " << i;
          }
        }
        // The sum is what it should be, not merely the CPU path's.
        for (int i = 0; i < 50; ++i) {
          const float want = static_cast<float>(6 * (i % 7)) * 0.5f;  // (1 + 2 + 3) * (i % 7)
          ASSERT_EQ(dev[0][static_cast<std::size_t>(i)], want) << i;
        }
      },
      &made);
  EXPECT_EQ(made, n);  // one device per rank, made once
}
TEST(DevicePath, FusedAllreducesGiveTheCpuPathsResults) { fused_allreduces(); }

// Out of place, every dtype the wire takes, and a broadcast from each root.
void out_of_place_and_broadcasts() {
  const int n = 2;
  run_device_ranks(n, [&](int rank, Runtime& rt) {
    std::vector<std::int64_t> in(10), out(10, -1);
    for (int i = 0; i < 10; ++i) in[static_cast<std::size_t>(i)] = (rank + 1) * i;
    AllreduceOptions o{.name = "i64", .op = ReduceOp::kSum};
    expect_done(ops::allreduce(rt, {on_device(view_of(in, DataType::kInt64))},
                               {on_device(view_of(out, DataType::kInt64))}, o, false));
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(out[static_cast<std::size_t>(i)], 3 * i);
      EXPECT_EQ(in[static_cast<std::size_t>(i)], (rank + 1) * i);  // the input is left alone
    }
    for (int root = 0; root < n; ++root) {
      std::vector<double> b(7, rank * 10.0 + 1);
      expect_done(ops::broadcast(rt, on_device(view_of(b, DataType::kFloat64)),
                                 {.name = "b" + std::to_string(root), .root = root}));
      for (double v : b) EXPECT_EQ(v, root * 10.0 + 1);
    }
  });
}
TEST(DevicePath, OutOfPlaceAllreducesAndBroadcasts) { out_of_place_and_broadcasts(); }

// A rank that joined contributes the op's identity on the device too, and the average
// still divides by every rank.
void joined_rank() {
  run_device_ranks(3, [&](int rank, Runtime& rt) {
    if (rank == 2) {
      ops::join(rt).wait();
      return;
    }
    std::vector<float> x(5, static_cast<float>(rank + 1) * 3);
    expect_done(ops::allreduce(rt, {on_device(view_of(x, DataType::kFloat32))},
                               {on_device(view_of(x, DataType::kFloat32))},
                               {.name = "j", .op = ReduceOp::kAverage}, false));
    for (float v : x) EXPECT_FLOAT_EQ(v, (3.0f + 6.0f) / 3);
    ops::join(rt).wait();
  });
}
TEST(DevicePath, AJoinedRankContributesTheIdentity) { joined_rank(); }

// Memory a test's output allocator hands out (the stand-in's "device memory" is host
// memory): one buffer per call, kept for the test to read.
struct Outputs {
  std::vector<std::shared_ptr<std::vector<unsigned char>>> buffers;
  std::vector<std::vector<std::int64_t>> shapes;
  OutputAllocator allocator() {
    return [this](DataType dtype, const std::vector<std::int64_t>& shape) {
      auto b = std::make_shared<std::vector<unsigned char>>(
          static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
      buffers.push_back(b);
      shapes.push_back(shape);
      TensorView v;
      v.data = b->data();
      v.dtype = dtype;
      v.shape = shape;
      v.device = DeviceKind::kCUDA;
      return v;
    };
  }
  template <typename T>
  std::vector<T> last() const {
    const auto& b = *buffers.back();
    std::vector<T> out(b.size() / sizeof(T));
    std::memcpy(out.data(), b.data(), b.size());
    return out;
  }
};

// Allgather (uneven rows), alltoall (uneven splits) and reducescatter (rows that do not
// divide evenly, average with pre- and postscale) of device memory: results in memory of
// the caller's allocator, equal to the CPU path's (Handle::output()).
void allgather_alltoall_reducescatter() {
  const int n = 3;
  run_device_ranks(n, [&](int rank, Runtime& rt) {
    Outputs outs;
    // allgather: rank r has r + 1 rows of 2.
    std::vector<float> g(static_cast<std::size_t>(2 * (rank + 1)));
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(rank * 100 + int(i));
    TensorView gv = view_of(g, DataType::kFloat32, {rank + 1, 2});
    Handle cpu = ops::allgather(rt, gv, {.name = "cpu.g"});
    expect_done(ops::allgather(rt, on_device(gv), {.name = "g", .output = outs.allocator()}));
    cpu.wait();
    EXPECT_EQ(outs.shapes.back(), (std::vector<std::int64_t>{6, 2}));
    EXPECT_EQ(outs.last<float>(), std::vector<float>(cpu.output().data_as<float>(),
                                                     cpu.output().data_as<float>() + 12));
    // alltoall: rank r sends j + r rows of 1 to rank j.
    std::vector<std::int64_t> splits;
    std::vector<std::int64_t> a;
    for (int j = 0; j < n; ++j) {
      splits.push_back(j + rank);
      for (int k = 0; k < j + rank; ++k) a.push_back(rank * 1000 + j * 10 + k);
    }
    const auto rows = static_cast<std::int64_t>(a.size());
    TensorView av = view_of(a, DataType::kInt64, {rows, 1});
    Handle cpu_a = ops::alltoall(rt, av, {.name = "cpu.a", .splits = splits});
    Handle dev_a = ops::alltoall(rt, on_device(av),
                                 {.name = "a", .splits = splits, .output = outs.allocator()});
    expect_done(dev_a);
    cpu_a.wait();
    EXPECT_EQ(dev_a.received_splits(), cpu_a.received_splits());
    const Tensor& ca = cpu_a.output();
    EXPECT_EQ(outs.shapes.back(), ca.shape());
    EXPECT_EQ(outs.last<std::int64_t>(),
              std::vector<std::int64_t>(ca.data_as<std::int64_t>(),
                                        ca.data_as<std::int64_t>() + ca.numel()));
    // reducescatter: 7 rows of 3 over 3 ranks (3, 2, 2 rows).
    std::vector<double> rsv(21);
    for (std::size_t i = 0; i < rsv.size(); ++i) rsv[i] = (rank + 1) * 0.5 + double(i);
    TensorView rv = view_of(rsv, DataType::kFloat64, {7, 3});
    const ReducescatterOptions ro{
        .name = "r", .op = ReduceOp::kAverage, .prescale_factor = 2.0, .postscale_factor = 0.5};
    ReducescatterOptions cro = ro;
    cro.name = "cpu.r";
    Handle cpu_r = ops::reducescatter(rt, rv, cro);
    ReducescatterOptions dro = ro;
    dro.output = outs.allocator();
    expect_done(ops::reducescatter(rt, on_device(rv), dro));
    cpu_r.wait();
    const Tensor& cr = cpu_r.output();
    EXPECT_EQ(outs.shapes.back(), cr.shape());
    EXPECT_EQ(outs.last<double>(),
              std::vector<double>(cr.data_as<double>(), cr.data_as<double>() + cr.numel()));
    // And what it should be: the average of (r + 1) * 0.5 + i over r, scaled by 2 * 0.5.
    const std::int64_t first_row = rank == 0 ? 0 : (rank == 1 ? 3 : 5);
    const auto got = outs.last<double>();
    for (std::size_t k = 0; k < got.size(); ++k) {
      EXPECT_DOUBLE_EQ(got[k], 1.0 + double(first_row * 3 + std::int64_t(k))) << k;
    }
    // The input is left alone (the prescale works on a copy).
    EXPECT_EQ(rsv[0], (rank + 1) * 0.5);
  });
}
TEST(DevicePath, AllgatherAlltoallAndReducescatterGiveTheCpuPathsResults) {
  allgather_alltoall_reducescatter();
}

// Device memory without an output allocator, or with one that gives the wrong memory,
// fails on that rank naming the op and what to do; the ranks still take part, so the
// others' results are right.
TEST(DevicePath, AResultWithoutAPlaceOnTheDeviceFailsNamingIt) {
  run_device_ranks(2, [&](int rank, Runtime& rt) {
    std::vector<float> x(4, static_cast<float>(rank + 1));
    TensorView v = on_device(view_of(x, DataType::kFloat32, {2, 2}));
    Outputs outs;
    AllgatherOptions o{.name = "g"};
    if (rank == 1) o.output = outs.allocator();
    Handle h = ops::allgather(rt, v, o);
    if (rank == 0) {
      try {
        h.wait();
        ADD_FAILURE() << "allgather of device memory without an allocator ran";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        const std::string m = e.what();
        EXPECT_NE(m.find("allgather 'g'"), std::string::npos) << m;
        EXPECT_NE(m.find("output allocator"), std::string::npos) << m;
      }
    } else {
      expect_done(h);
      EXPECT_EQ(outs.last<float>(), (std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2}));
    }
    // An allocator that gives host memory.
    ReducescatterOptions r{.name = "r", .op = ReduceOp::kSum};
    r.output = [](DataType dtype, const std::vector<std::int64_t>& shape) {
      TensorView bad;
      bad.dtype = dtype;
      bad.shape = shape;
      bad.data = reinterpret_cast<void*>(64);  // never written: refused before
      return bad;
    };
    try {
      ops::reducescatter(rt, v, r).wait();
      ADD_FAILURE() << "a host-memory output was taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("must return device memory on cuda:0"),
                std::string::npos)
          << e.what();
    }
  });
}

// A rank whose device stops taking part (its "NCCL" connections die): the others' device
// collective fails (here within the stand-in's timeout; on a GPU within the peer timeout,
// DevicePath::poll), their waits for its event say so, and their runtimes end as after a
// peer failure, naming the rank, instead of hanging. The dead rank's runtime ends at once
// (its own device work failed), so the others' next negotiation fails at the peer timeout
// (4 s here) if their poll has not ended them first.
TEST(DevicePath, ADeadPeerOnTheDeviceEndsTheRuntimeNamingIt) {
  device::host::InprocFabric fabric;
  std::atomic<int> failed{0};
  run_device_ranks(
      3,
      [&](int rank, Runtime& rt) {
        std::vector<float> x(4, 1.0f);
        TensorView v = on_device(view_of(x, DataType::kFloat32));
        expect_done(ops::allreduce(rt, {v}, {v}, {.name = "first", .op = ReduceOp::kSum}, false));
        EXPECT_EQ(x[0], 3.0f);
        ops::barrier(rt, {}).wait();  // every rank's first device collective is done
        if (rank == 2) {
          for (auto* world : fabric.worlds()) world->kill(2);
        }
        ops::barrier(rt, {}).wait();
        const auto start = std::chrono::steady_clock::now();
        // The handle completes once the work is enqueued (CUDA's semantics); the work
        // itself fails, and so does the caller's wait for its event, and the runtime ends:
        // the next operation fails naming the peer.
        Handle second;
        try {
          second = ops::allreduce(rt, {v}, {v}, {.name = "second", .op = ReduceOp::kSum}, false);
          const Status s = device_done(second);
          EXPECT_FALSE(s.ok()) << "rank " << rank << ": the allreduce with a dead device peer ran";
          ops::barrier(rt, {}).wait();
          ADD_FAILURE() << "rank " << rank << ": the runtime went on after its device failed";
        } catch (const Error& e) {
          ++failed;
          EXPECT_EQ(e.code(), ErrorCode::kPeerFailure) << e.what();
          if (rank != 2) {
            EXPECT_NE(std::string(e.what()).find("2"), std::string::npos) << e.what();
          }
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
      },
      nullptr, &fabric, /*device_timeout=*/1.0, nullptr, /*peer_timeout=*/4.0);
  EXPECT_EQ(failed, 3);

  // The next generation (what an elastic reset does: new runtimes among the survivors,
  // the same device factory) makes new devices and a new device communicator, and
  // reduces right.
  const std::size_t worlds_before = fabric.worlds().size();
  int made = 0;
  run_device_ranks(
      2,
      [&](int rank, Runtime& rt) {
        std::vector<float> y(5, static_cast<float>(rank + 1));
        TensorView v = on_device(view_of(y, DataType::kFloat32));
        expect_done(ops::allreduce(rt, {v}, {v}, {.name = "again", .op = ReduceOp::kSum}, false));
        for (float e : y) EXPECT_EQ(e, 3.0f);
      },
      &made, &fabric);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(fabric.worlds().size(), worlds_before + 1);  // one new communicator
}

// Streams: the device path's stream waits for the caller's ready event before it reads
// the input, the handle completes while that device work still waits (no host
// synchronisation), the caller's memory is held until the work has run, and the caller's
// wait for the handle's device event orders its reads after it.
TEST(DevicePath, EventsOrderTheCallersStreamsWithoutTheHostWaiting) {
  const int n = 2;
  run_device_ranks(n, [&](int rank, Runtime& rt) {
    // The caller's own "GPU" stream: held at a gate, then it writes the input.
    std::unique_ptr<device::Device> mine =
        device::host::make_host_device({.index = 10 + rank, .timeout_seconds = 20});
    std::unique_ptr<device::Stream> producer;
    std::unique_ptr<device::Event> produced;
    ASSERT_TRUE(mine->create_stream(&producer).ok());
    ASSERT_TRUE(mine->create_event(&produced).ok());
    std::promise<void> open;
    std::shared_future<void> opened = open.get_future().share();
    std::vector<float> x(6, -1.0f);
    ASSERT_TRUE(
        mine->host_function(*producer, [opened] { opened.wait_for(std::chrono::seconds(20)); })
            .ok());
    ASSERT_TRUE(mine->host_function(
                        *producer,
                        [&x, rank] { std::fill(x.begin(), x.end(), static_cast<float>(rank + 1)); })
                    .ok());
    ASSERT_TRUE(mine->record(*produced, *producer).ok());

    TensorView v = on_device(view_of(x, DataType::kFloat32));
    v.ready_event = mine->native_event(*produced);
    std::weak_ptr<int> held;
    std::shared_ptr<device::host::Marker> group_done;  // what the caller's stream waits for
    {
      Handle h = ops::allreduce(rt, {v}, {v}, {.name = "ordered", .op = ReduceOp::kSum}, false);
      auto owner = std::make_shared<int>(1);  // stands for the caller's tensors
      held = owner;
      h.keep_alive(std::move(owner));
      h.wait();  // returns while the producer is still held at its gate
      ASSERT_NE(h.device_event(), nullptr);
      group_done = static_cast<device::host::HostEvent*>(h.device_event())->latest();
      ASSERT_TRUE(group_done);
      EXPECT_FALSE(group_done->done());
      EXPECT_EQ(x[0], -1.0f);
    }
    // The handle is gone; the runtime still holds the caller's memory for the device work.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(held.expired());
    open.set_value();
    // Released once the work has run (the runtime polls it every cycle).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!held.expired() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_TRUE(held.expired());
    ASSERT_TRUE(group_done->wait_until(deadline_after(20), "the test's wait").ok());
    for (float e : x) EXPECT_EQ(e, 3.0f);  // 1 + 2: each rank's input as its producer wrote it
    // The next operation waits for its own ready event only: none here.
    std::vector<float> y(3, static_cast<float>(rank));
    TensorView w = on_device(view_of(y, DataType::kFloat32));
    expect_done(ops::allreduce(rt, {w}, {w}, {.name = "next", .op = ReduceOp::kMax}, false));
    for (float e : y) EXPECT_EQ(e, 1.0f);
  });
}

// The device is made for the GPU of the first device tensor; a tensor on another GPU is
// refused naming both (one GPU per process), and the other ranks' collective completes.
TEST(DevicePath, ATensorOnAnotherGpuIsRefusedNamingIt) {
  const int n = 2;
  std::vector<int> indices(n, -2);
  run_device_ranks(
      n,
      [&](int rank, Runtime& rt) {
        std::vector<float> x(4, 1.0f);
        TensorView v = on_device(view_of(x, DataType::kFloat32));
        v.device_index = rank == 0 ? 0 : 1;
        expect_done(ops::allreduce(rt, {v}, {v}, {.name = "first"}, false));
        EXPECT_EQ(x[0], 1.0f);  // the average of 1 and 1
        std::vector<float> y(4, 5.0f);
        TensorView w = on_device(view_of(y, DataType::kFloat32));
        w.device_index = rank == 0 ? 1 : 1;  // rank 0's device is cuda:0
        Handle h = ops::allreduce(rt, {w}, {w}, {.name = "elsewhere", .op = ReduceOp::kSum}, false);
        if (rank == 0) {
          try {
            h.wait();
            ADD_FAILURE() << "a tensor on another GPU ran";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
            const std::string m = e.what();
            EXPECT_NE(m.find("'elsewhere'"), std::string::npos) << m;
            EXPECT_NE(m.find("cuda:1"), std::string::npos) << m;
            EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
          }
        } else {
          expect_done(h);
          EXPECT_EQ(y[0], 5.0f);  // rank 0 contributed the identity
        }
      },
      nullptr, nullptr, 20, &indices);
  EXPECT_EQ(indices, (std::vector<int>{0, 1}));
}

// Without a device factory nothing changes: device memory is refused as before.
TEST(DevicePath, WithoutADeviceDeviceMemoryIsRefusedAsBefore) {
  testing::run_ranks(2, test_config(), [](int, Runtime& rt) {
    EXPECT_FALSE(rt.has_device_path());
    std::vector<float> x(3, 1.0f);
    TensorView v = on_device(view_of(x, DataType::kFloat32));
    try {
      ops::allreduce(rt, {v}, {v}, {.name = "nodev"}, false).wait();
      ADD_FAILURE() << "device memory reduced without a device";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    }
  });
}

// Ranks whose devices are one GPU: the runtime's device path is the same, its collectives
// are the CUDA-IPC path's (connect_collectives finds the shared device), the results the
// same as the CPU path's.
TEST(DevicePath, RanksSharingAGpuGiveTheSameResultsThroughCudaIpc) {
  SharedGpu shared;
  fused_allreduces();
  out_of_place_and_broadcasts();
  joined_rank();
  allgather_alltoall_reducescatter();
}

// Ranks on hosts of their own with KOLO_HIERARCHICAL=1: the hierarchical device
// collectives (each slice across hosts over the CPU transport; allgather, alltoall and
// reducescatter staged through host memory), the same results as the CPU path's.
TEST(DevicePath, RanksOnSeveralHostsGiveTheSameResultsHierarchically) {
  HostPerRank hosts;
  fused_allreduces();
  out_of_place_and_broadcasts();
  joined_rank();
  allgather_alltoall_reducescatter();
}

}  // namespace
}  // namespace kolo::core
