// kolo::elastic (kolo.h): PLACEHOLDER while issue 16's worker side is written: every
// function acts as in a job that is not elastic. Replaced in the same session.
#include "kolo/kolo.h"

namespace kolo::elastic {

bool enabled() { return false; }
int generation() { return -1; }
bool hosts_updated() { return false; }
bool reset() {
  throw Error(ErrorCode::kInvalidArgument,
              "kolo::elastic::reset(): this job is not elastic (start it with kolorun --min-np "
              "MIN --max-np MAX)");
}

}  // namespace kolo::elastic
