// Hosts: parsing `-H host1:2,host2:2` and hostfiles (`host slots=N`) into a host list.
//
// Pure: strings in, a list of (host, slots) out, with errors that quote the bad input
// (and the line number for files). Not for: deciding how ranks map onto hosts
// (layout.h) or how mpirun is told about them (mpirun_command.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace kolo::launcher {

struct HostSlots {
  std::string host;
  int slots = 1;

  bool operator==(const HostSlots&) const = default;
};

// Parses "a:2,b,c:4" (a host without ":N" has one slot). A host named twice keeps its
// first position and gets the sum of its slots, as mpirun does.
Status parse_host_list(const std::string& text, std::vector<HostSlots>* out);

// What a hostfile may hold: a larger file, or a longer line, is refused (a mistyped path
// such as /dev/zero must not make kolorun read without bound).
inline constexpr size_t kMaxHostfileBytes = 1 << 20;
inline constexpr size_t kMaxHostfileLine = 4096;

// Parses hostfile text: one host per line, optionally followed by `slots=N`; `#` starts
// a comment; blank lines are skipped. `source` names the file in error messages.
Status parse_hostfile(const std::string& text, const std::string& source,
                      std::vector<HostSlots>* out);

// Reads and parses the hostfile at `path`.
Status read_hostfile(const std::string& path, std::vector<HostSlots>* out);

int total_slots(const std::vector<HostSlots>& hosts);

// "a:2,b:2": the form mpirun's --host takes.
std::string format_host_list(const std::vector<HostSlots>& hosts);

}  // namespace kolo::launcher
