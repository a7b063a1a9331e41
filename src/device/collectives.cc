// connect_collectives (device.h): one communicator's way of being made, for every device:
// NCCL's (a UniqueId) where every rank has a GPU of its own, the CUDA-IPC path where ranks
// of one host share one.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/hier/hier_collectives.h"
#include "device/ipc/ipc_collectives.h"
#include "transport/shm/shm_segment.h"

namespace kolo::device {

namespace {

// Rank 0's decision, as every rank receives it: a kind letter and its payload.
//   'N' + UniqueId bytes       NCCL's way
//   'I' + segment name         the CUDA-IPC path over rank 0's shared-memory segment
//   'H' + host indices         hierarchical: each rank's host (0, 1, ... in order of their
//                              first rank), comma-separated
//   'E' + code byte + message  every rank fails with it
constexpr char kNccl = 'N', kIpc = 'I', kHier = 'H', kError = 'E';

std::string error_decision(const Status& s) {
  return std::string(1, kError) + static_cast<char>(s.code()) + s.message();
}

// Rank 0: what every rank does, from each rank's "host\ndevice" (`all`, in rank order).
std::string decide(Device& device, const std::vector<std::string>& all, bool hierarchical,
                   transport::shm::Segment* segment) {
  std::map<std::string, std::vector<int>> by_device;
  std::vector<std::string> hosts;
  std::vector<int> host_of;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const std::size_t cut = all[r].find('\n');
    const std::string host = all[r].substr(0, cut);
    by_device[all[r].substr(cut + 1)].push_back(static_cast<int>(r));
    const auto known = std::find(hosts.begin(), hosts.end(), host);
    host_of.push_back(static_cast<int>(known - hosts.begin()));
    if (known == hosts.end()) hosts.push_back(host);
  }
  // physical_id() names the host too: ranks that share a device share a host.
  const std::vector<int>* shared = nullptr;
  for (const auto& [id, ranks] : by_device) {
    if (ranks.size() > 1) shared = &ranks;
  }
  if (hosts.size() > 1 && (shared != nullptr || hierarchical)) {
    std::string payload(1, kHier);
    for (std::size_t r = 0; r < host_of.size(); ++r) {
      payload += (r == 0 ? "" : ",") + std::to_string(host_of[r]);
    }
    return payload;
  }
  if (shared == nullptr) {
    UniqueId id;
    const Status s = device.create_unique_id(&id);
    if (!s.ok()) return error_decision(s);
    return std::string(1, kNccl) +
           std::string(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
  }
  const Status s = transport::shm::Segment::create(static_cast<int>(all.size()), 4096, segment);
  if (!s.ok()) return error_decision(s);
  return std::string(1, kIpc) + segment->name();
}

double seconds_left(Deadline deadline) {
  return std::max(1.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}

}  // namespace

Status connect_collectives(Device& device, transport::Communicator& control, Deadline deadline,
                           std::unique_ptr<Collectives>* out, const ConnectOptions& options) {
  std::vector<std::string> all;
  KOLO_RETURN_IF_ERROR(
      control.control_gather(device.host() + "\n" + device.physical_id(), &all, deadline));
  transport::shm::Segment segment;
  std::string decision;
  if (control.rank() == 0) decision = decide(device, all, options.hierarchical, &segment);
  const Status sent = control.control_broadcast(&decision, deadline);
  if (!sent.ok()) {
    if (!segment.name().empty()) transport::shm::Segment::unlink(segment.name());
    return sent;
  }
  if (decision.empty()) return Internal("connect_collectives: rank 0 sent no decision");
  const std::string payload = decision.substr(1);
  if (decision[0] == kError && !payload.empty()) {
    return Status(static_cast<ErrorCode>(payload[0]), payload.substr(1));
  }
  const double timeout =
      options.ipc_timeout_seconds > 0 ? options.ipc_timeout_seconds : seconds_left(deadline);
  if (decision[0] == kHier) {
    std::vector<int> host_of;
    for (std::size_t at = 0; at < payload.size();) {
      const std::size_t comma = std::min(payload.find(',', at), payload.size());
      host_of.push_back(std::stoi(payload.substr(at, comma - at)));
      at = comma + 1;
    }
    if (host_of.size() != static_cast<std::size_t>(control.size())) {
      return Internal("connect_collectives: rank 0 sent " + std::to_string(host_of.size()) +
                      " host indices for " + std::to_string(control.size()) + " ranks");
    }
    return hier::make_hier_collectives(device, control, host_of, options, timeout, deadline, out);
  }
  if (decision[0] == kIpc) {
    // Every rank maps the segment and takes its liveness lock before any barrier in it.
    Status s = control.rank() == 0
                   ? Status::OK()
                   : transport::shm::Segment::open(payload, control.size(), &segment);
    if (s.ok()) s = segment.join(control.rank());
    std::vector<std::uint64_t> joined{s.ok() ? ~std::uint64_t{0} : 0};
    const Status agreed = control.control_and(joined, deadline);
    if (control.rank() == 0) transport::shm::Segment::unlink(payload);  // every rank opened it
    KOLO_RETURN_IF_ERROR(s);
    KOLO_RETURN_IF_ERROR(agreed);
    if (joined[0] == 0) {
      return PeerFailure(
          "connect_collectives: a rank could not open the CUDA-IPC path's "
          "shared-memory segment " +
          payload + " (its log says why)");
    }
    const ipc::IpcOptions o{.half_bytes = options.ipc_half_bytes,
                            .timeout_seconds = timeout,
                            .rank_names = options.rank_names};
    return ipc::make_ipc_collectives(device, std::move(segment), control.rank(), control.size(), o,
                                     deadline, out);
  }
  UniqueId id;
  if (decision[0] != kNccl || payload.size() != id.bytes.size()) {
    return Internal("connect_collectives: rank 0 sent a decision of " +
                    std::to_string(decision.size()) + " bytes that is not a unique id");
  }
  std::memcpy(id.bytes.data(), payload.data(), payload.size());
  return device.create_collectives(id, control.rank(), control.size(), deadline, out);
}

}  // namespace kolo::device
