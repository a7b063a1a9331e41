// Keys of a kolorun job's store (its own launcher, not elastic) that kolorun and the
// workers' kolo share, beside the exit notices kolorun publishes ("launcher/exit/<rank>",
// "launcher/exits": gloo_communicator.h reads them).
//
// Not for: an elastic job's keys (elastic_keys.h).
#pragma once

#include <string>

namespace kolo::rendezvous::launcher_keys {

// "launcher/after/<rank>": the ranks ("2" or "2,5") whose leaving (their programs ended
// without kolo::shutdown()) ended this rank's kolo while it waited for them. kolorun does
// not take that rank's exit for the cause of the job's end when one of those ranks failed.
inline std::string after_key(int rank) { return "launcher/after/" + std::to_string(rank); }

}  // namespace kolo::rendezvous::launcher_keys
