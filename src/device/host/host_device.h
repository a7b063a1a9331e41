// The host stand-in for a device (device.h): host memory, a thread per stream, events as
// markers, kolo's CPU kernels (common/reduce.h, common/convert.h), and collectives over a
// CPU transport. It is what the CPU tests run the device data path on, so that the NCCL
// backend's, the streams' and the fusion's control logic is tested without a GPU; it is
// not a way to train (the CPU transports do that directly).
//
// Not for: the real device (cuda/).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/device.h"
#include "transport/inproc/inproc.h"

namespace kolo::device::host {

// The stand-in's network: the CPU communicator of rank `rank` among the `size` ranks that
// connect with `id` (NCCL's ncclCommInitRank over its own connections).
using Connect = std::function<Status(const UniqueId& id, int rank, int size, Deadline deadline,
                                     std::unique_ptr<transport::Communicator>* out)>;

struct HostDeviceOptions {
  int index = 0;  // in name(): "host stand-in <index>"
  // The bound of a stream's wait for an event and of a collective's wait for its peers
  // (KOLO_PEER_TIMEOUT_SECONDS's role for NCCL).
  double timeout_seconds = 60;
  Connect connect{};  // required for create_collectives
  // The physical device this stand-in plays: stand-ins with the same non-empty id count
  // as one GPU (ranks that share it take the CUDA-IPC path, see connect_collectives);
  // empty: a device of its own.
  std::string shared_id{};
  // The machine it claims to be on (Device::host()); empty: this one. Tests pretend hosts.
  std::string host{};
};

std::unique_ptr<Device> make_host_device(HostDeviceOptions options);

// For tests: an in-process network, one InprocWorld per UniqueId. The first rank that
// connects with an id makes the world of `size` ranks; each rank takes its communicator.
// Shared by the ranks' devices (they are threads of one test).
class InprocFabric {
 public:
  Connect connector();
  // The world of `id` (null before its first rank connected): for fault injection
  // (kill(rank)).
  transport::InprocWorld* world(const UniqueId& id);
  // Every world so far (kill a rank in all of them).
  std::vector<transport::InprocWorld*> worlds();

 private:
  std::mutex mu_;
  std::map<std::array<unsigned char, 128>, std::shared_ptr<transport::InprocWorld>> worlds_;
};

}  // namespace kolo::device::host
