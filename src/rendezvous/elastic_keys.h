// The keys of an elastic job's store that kolorun's elastic driver and the workers share
// (docs/elastic.md, "The driver and the workers: the store protocol"), and the text of a
// generation's plan. One place for both sides: the driver (src/launcher) writes plans and
// exit notices, the workers (src/core/elastic_*) read them and write their own keys.
//
// Pure (names and text), except the two small helpers at the end that read the store.
// Not for: what either side does with the keys (their own files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "rendezvous/store.h"

namespace kolo::rendezvous::elastic_keys {

// One member of a generation, in rank order (the rank is its index in the plan).
struct Member {
  std::int64_t id = 0;  // the worker's KOLO_ELASTIC_ID
  std::string host;     // as kolorun names it (no spaces)
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  bool operator==(const Member&) const = default;
};

// "elastic/plan/<g>": the members of generation g.
std::string plan_key(std::int64_t generation);
// "elastic/generations": the counter of plans written (the newest is generations - 1).
inline constexpr const char* kGenerationsKey = "elastic/generations";
// "elastic/finished": the job is ending (a sentence saying why); no plan follows.
inline constexpr const char* kFinishedKey = "elastic/finished";
// "elastic/<g>": the prefix of everything generation g's workers and transport write.
std::string generation_prefix(std::int64_t generation);
// "elastic/<g>/launcher": where the driver publishes exits of g's members (exit/<rank>,
// exits), as the launcher notices of a non-elastic job ("launcher/...").
std::string launcher_prefix(std::int64_t generation);
// "elastic/<g>/arrived/<rank>": a member arrived at g's start barrier.
std::string arrived_key(std::int64_t generation, int rank);
// "elastic/<g>/reset_requests": a counter; a worker whose generation failed without a
// newer plan asks the driver for one.
std::string reset_requests_key(std::int64_t generation);

// The plan's text: one "<id> <host> <local_rank> <local_size> <cross_rank> <cross_size>\n"
// per member, in rank order.
std::string format_plan(const std::vector<Member>& members);
// Parses format_plan's text; kInvalidArgument naming the line when it is malformed (a
// plan with no member is valid: every worker was removed).
Status parse_plan(const std::string& text, std::vector<Member>* members);
// The rank of worker `id` in `members`; -1 when it is not a member.
int rank_of(const std::vector<Member>& members, std::int64_t id);

// The number of plans written so far (0 while there is none).
Status generations(Store& store, std::int64_t* count);

}  // namespace kolo::rendezvous::elastic_keys
