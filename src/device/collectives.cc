// connect_collectives (device.h): NCCL's way of making a communicator, for every device.
#include <cstring>
#include <string>

#include "device/device.h"

namespace kolo::device {

Status connect_collectives(Device& device, transport::Communicator& control, Deadline deadline,
                           std::unique_ptr<Collectives>* out) {
  UniqueId id;
  std::string wire;
  if (control.rank() == 0) {
    KOLO_RETURN_IF_ERROR(device.create_unique_id(&id));
    wire.assign(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
  }
  KOLO_RETURN_IF_ERROR(control.control_broadcast(&wire, deadline));
  if (wire.size() != id.bytes.size()) {
    return Internal("connect_collectives: rank 0 sent a unique id of " +
                    std::to_string(wire.size()) + " bytes, expected " +
                    std::to_string(id.bytes.size()));
  }
  std::memcpy(id.bytes.data(), wire.data(), wire.size());
  return device.create_collectives(id, control.rank(), control.size(), deadline, out);
}

}  // namespace kolo::device
