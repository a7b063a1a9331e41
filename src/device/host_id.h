// This host's identity for the device layer's physical_id(): its name and the kernel's
// boot id, so that two processes compare equal exactly when they run on one machine (one
// boot of it), also in containers that share a host name.
//
// Not for: the launcher's host names (launcher/hosts.h), which follow the user's host list.
#pragma once

#include <unistd.h>

#include <fstream>
#include <string>

namespace kolo::device {

inline std::string host_id() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return std::string(name[0] != '\0' ? name : "unknown-host") + " " + boot;
}

}  // namespace kolo::device
