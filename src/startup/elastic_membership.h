// An elastic worker's side of a generation's start (docs/elastic.md, "A generation's
// life, on the worker", steps 1 and 2): wait for kolorun's next plan, find this worker in
// it, and meet the plan's other members at the generation's start barrier.
//
//   ElasticMembership m;
//   KOLO_RETURN_IF_ERROR(join_generation(store, id, /*from=*/last + 1, timeout_s, &m));
//   if (m.removed) ...                         // not in the job any more: m.why says why
//   ... start the runtime with m.rank/m.size under elastic_keys::generation_prefix(m.generation)
//
// Not for: starting the runtime (api.cc) or the driver's side (src/launcher).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "rendezvous/elastic_keys.h"
#include "rendezvous/store.h"

namespace kolo::core {

struct ElasticMembership {
  std::int64_t generation = -1;
  // This worker's place in the generation (its index in `members`).
  int rank = -1;
  int size = 0;
  int local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  std::vector<rendezvous::elastic_keys::Member> members;
  // kolorun's newest plan does not hold this worker (its host left, or the job is ending:
  // elastic/finished); `why` says which. The other fields are then unset.
  bool removed = false;
  std::string why;
};

// Waits for a plan of generation `from` or newer, takes the newest, and (unless this
// worker `id` is not in it: out->removed) sets its arrival key and waits for every member's.
// A plan newer still that appears while it waits abandons that generation for the newest.
// Past `timeout_s` (KOLO_ELASTIC_TIMEOUT_SECONDS): kPeerFailure saying what never came
// (no plan, or the ranks that never arrived, with their hosts and worker ids).
Status join_generation(rendezvous::Store& store, std::int64_t id, std::int64_t from,
                       double timeout_s, ElasticMembership* out);

// Whether kolorun wrote a plan newer than `generation` (a counter read; no wait).
Status newer_plan_exists(rendezvous::Store& store, std::int64_t generation, bool* newer);

}  // namespace kolo::core
