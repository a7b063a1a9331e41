// The runtime's device path (device_path.h) over the device layer's host stand-in: device
// tensors (DeviceKind::kCUDA, not staged on the host) of allreduces and broadcasts run
// through the device's collectives with the CPU path's tensor semantics, 2-3 ranks as
// threads. The stand-in's "device memory" is host memory, so the test reads it directly.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/reduce.h"
#include "core/ops.h"
#include "core/runtime.h"
#include "core/testing/ranks.h"
#include "device/host/host_device.h"

namespace kolo::core {
namespace {

using testing::test_config;
using testing::view_of;

TensorView on_device(TensorView v) {
  v.device = DeviceKind::kCUDA;
  return v;
}

// run_ranks with a stand-in device for each runtime (all of them joined by one in-process
// fabric). `fabric_out`: the fabric, for fault injection; `device_timeout`: the stand-in's
// bound.
void run_device_ranks(int n, const std::function<void(int, Runtime&)>& fn,
                      int* devices_made = nullptr, device::host::InprocFabric* fabric_out = nullptr,
                      double device_timeout = 20) {
  device::host::InprocFabric own;
  device::host::InprocFabric& fabric = fabric_out ? *fabric_out : own;
  std::atomic<int> made{0};
  testing::run_ranks(n, test_config(), fn, 0, nullptr, [&](int r, Runtime& rt) {
    rt.set_device_factory([&, r](std::unique_ptr<device::Device>* out) {
      ++made;
      *out = device::host::make_host_device(
          {.index = r, .timeout_seconds = device_timeout, .connect = fabric.connector()});
      return Status::OK();
    });
  });
  if (devices_made) *devices_made = made;
}

// Sums, averages with pre- and postscale, and float16 compression of several tensors
// submitted at once (one fused group on the device), against the same on the CPU path.
TEST(DevicePath, FusedAllreducesGiveTheCpuPathsResults) {
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
        for (auto& h : handles) h.wait();
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

// Out of place, every dtype the wire takes, and a broadcast from each root.
TEST(DevicePath, OutOfPlaceAllreducesAndBroadcasts) {
  const int n = 2;
  run_device_ranks(n, [&](int rank, Runtime& rt) {
    std::vector<std::int64_t> in(10), out(10, -1);
    for (int i = 0; i < 10; ++i) in[static_cast<std::size_t>(i)] = (rank + 1) * i;
    AllreduceOptions o{.name = "i64", .op = ReduceOp::kSum};
    ops::allreduce(rt, {on_device(view_of(in, DataType::kInt64))},
                   {on_device(view_of(out, DataType::kInt64))}, o, false)
        .wait();
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(out[static_cast<std::size_t>(i)], 3 * i);
      EXPECT_EQ(in[static_cast<std::size_t>(i)], (rank + 1) * i);  // the input is left alone
    }
    for (int root = 0; root < n; ++root) {
      std::vector<double> b(7, rank * 10.0 + 1);
      ops::broadcast(rt, on_device(view_of(b, DataType::kFloat64)),
                     {.name = "b" + std::to_string(root), .root = root})
          .wait();
      for (double v : b) EXPECT_EQ(v, root * 10.0 + 1);
    }
  });
}

// A rank that joined contributes the op's identity on the device too, and the average
// still divides by every rank.
TEST(DevicePath, AJoinedRankContributesTheIdentity) {
  run_device_ranks(3, [&](int rank, Runtime& rt) {
    if (rank == 2) {
      ops::join(rt).wait();
      return;
    }
    std::vector<float> x(5, static_cast<float>(rank + 1) * 3);
    ops::allreduce(rt, {on_device(view_of(x, DataType::kFloat32))},
                   {on_device(view_of(x, DataType::kFloat32))},
                   {.name = "j", .op = ReduceOp::kAverage}, false)
        .wait();
    for (float v : x) EXPECT_FLOAT_EQ(v, (3.0f + 6.0f) / 3);
    ops::join(rt).wait();
  });
}

// What the device path does not take yet fails clearly, and a host-staged CUDA tensor
// on a runtime with a device path is named.
TEST(DevicePath, OpsNotOnTheDevicePathAreRefusedNamingThem) {
  run_device_ranks(2, [&](int, Runtime& rt) {
    Tensor t(DataType::kFloat32, {4});
    TensorView v = on_device(t.view());
    try {
      ops::allgather(rt, v, {.name = "g"}).wait();
      ADD_FAILURE() << "allgather of device memory ran";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("allgather 'g'"), std::string::npos) << e.what();
    }
  });
}

// A rank whose device stops taking part (its "NCCL" connections die; its CPU control
// plane lives): the others' device collective fails within the device's timeout naming
// it, as a peer failure that ends their runtimes, instead of hanging.
TEST(DevicePath, ADeadPeerOnTheDeviceEndsTheRuntimeNamingIt) {
  device::host::InprocFabric fabric;
  std::atomic<int> failed{0};
  run_device_ranks(
      3,
      [&](int rank, Runtime& rt) {
        std::vector<float> x(4, 1.0f);
        TensorView v = on_device(view_of(x, DataType::kFloat32));
        ops::allreduce(rt, {v}, {v}, {.name = "first", .op = ReduceOp::kSum}, false).wait();
        EXPECT_EQ(x[0], 3.0f);
        ops::barrier(rt, {}).wait();  // every rank's first device collective is done
        if (rank == 2) {
          for (auto* world : fabric.worlds()) world->kill(2);
        }
        ops::barrier(rt, {}).wait();
        const auto start = std::chrono::steady_clock::now();
        try {
          ops::allreduce(rt, {v}, {v}, {.name = "second", .op = ReduceOp::kSum}, false).wait();
          ADD_FAILURE() << "rank " << rank << ": the allreduce with a dead device peer ran";
        } catch (const Error& e) {
          ++failed;
          EXPECT_EQ(e.code(), ErrorCode::kPeerFailure) << e.what();
          if (rank != 2) {
            EXPECT_NE(std::string(e.what()).find("2"), std::string::npos) << e.what();
          }
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
      },
      nullptr, &fabric, /*device_timeout=*/1.0);
  EXPECT_EQ(failed, 3);
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

}  // namespace
}  // namespace kolo::core
