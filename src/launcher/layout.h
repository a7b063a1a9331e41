// Layout: which worker runs where, and the KOLO_* rank variables that follow from it.
//
// A layout is the number of workers on each host, in rank order: mpirun's `--map-by slot`
// fills the first host's slots before the second's, so ranks [0, c0) are on host 0,
// [c0, c0+c1) on host 1, and so on. kolorun computes it once and hands it to every
// worker's shim as KOLO_HOST_SLOTS="c0,c1,..."; the shim turns (layout, rank) into
// local and cross ranks. Pure. Not for: parsing host names (hosts.h) or spawning.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "launcher/hosts.h"

namespace kolo::launcher {

// The environment variable that carries the layout from kolorun to the shims.
inline constexpr const char* kHostSlotsVar = "KOLO_HOST_SLOTS";

struct WorkerRanks {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the workers on this host
  int local_size = 1;  // workers on this host
  int cross_rank = 0;  // rank among workers with the same local rank (= host index)
  int cross_size = 1;  // hosts that have a worker with this local rank

  bool operator==(const WorkerRanks&) const = default;
};

// Workers per host when `np` workers fill `hosts` in order (hosts left empty are
// dropped). Requires 1 <= np <= total_slots(hosts); with no hosts, all on one host.
std::vector<int> fill_hosts(const std::vector<HostSlots>& hosts, int np);

// Computes the ranks of worker `rank` in `layout` (workers per host, all >= 1).
Status compute_ranks(const std::vector<int>& layout, int rank, WorkerRanks* out);

// "2,2" <-> {2, 2}. Parsing rejects empty entries and counts < 1.
std::string format_layout(const std::vector<int>& layout);
Status parse_layout(const std::string& text, std::vector<int>* out);

}  // namespace kolo::launcher
