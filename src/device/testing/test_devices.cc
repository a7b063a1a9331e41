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

}  // namespace kolo::device::testing
