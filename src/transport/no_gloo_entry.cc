// Stand-in for gloo/gloo_entry.cc in a build without Gloo: the table has no "gloo" entry.
#include "transport/table.h"

namespace kolo::transport {

std::vector<TransportFactory> gloo_entries() { return {}; }

}  // namespace kolo::transport
