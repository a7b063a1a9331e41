// The host stand-in as a test device (test_devices.h).
#include "device/testing/test_devices.h"

namespace kolo::device::testing {

TestDevice host_test_device() {
  return {
      .kind = "host",
      .max_ranks = 4,
      .make = [](int rank, double timeout, host::Connect connect, std::unique_ptr<Device>* out) {
        *out = host::make_host_device(
            {.index = rank, .timeout_seconds = timeout, .connect = std::move(connect)});
        return Status::OK();
      }};
}

TestDevice host_ipc_test_device() {
  return {.kind = "host_ipc",
          .max_ranks = 4,
          .make =
              [](int rank, double timeout, host::Connect connect, std::unique_ptr<Device>* out) {
                *out = host::make_host_device({.index = rank,
                                               .timeout_seconds = timeout,
                                               .connect = std::move(connect),
                                               .shared_id = "test gpu"});
                return Status::OK();
              },
          .connect = {.ipc_half_bytes = 64}};
}

TestDevice host_hier_test_device() {
  return {.kind = "host_hier",
          .max_ranks = 4,
          .make =
              [](int rank, double timeout, host::Connect connect, std::unique_ptr<Device>* out) {
                const std::string host = "pretend host " + std::to_string(rank % 2);
                *out = host::make_host_device({.index = rank,
                                               .timeout_seconds = timeout,
                                               .connect = std::move(connect),
                                               .shared_id = "gpu of " + host,
                                               .host = host});
                return Status::OK();
              },
          .connect = {.ipc_half_bytes = 64, .hierarchical = true},
          .even_ranks_only = true};
}

}  // namespace kolo::device::testing
