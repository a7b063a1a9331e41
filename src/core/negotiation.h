// Negotiation: the coordinator's pure logic. It collects every rank's requests by name,
// decides which operations every rank is ready for, validates that the ranks agree, and
// produces the ordered responses every rank executes. No threads or transports here, so
// all of it is unit-tested directly.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "core/message.h"

namespace kolo::core {

using Clock = std::chrono::steady_clock;

// The response for one name, built from the requests of the ranks that submitted it
// (sorted by rank). `joined` are the ranks that have called join() and take part in
// allreduces with the op's identity (zero for sums). Returns an error response when ranks disagree
// or an argument is invalid; the message names the tensor, the ranks and their values.
Response make_response(const std::vector<Request>& requests,
                       const std::vector<std::int32_t>& joined, int size);

// Rows of dim 0 that rank r keeps in a reducescatter of `rows` rows over `size` ranks:
// the first rows % size ranks get one more.
std::int64_t reducescatter_rows(std::int64_t rows, int size, int rank);

class MessageTable {
 public:
  explicit MessageTable(int size) : size_(size) {}

  // Adds the requests that rank `sender` sent (the transport says who sent them). Fails,
  // adding none of them, when one carries another rank's number: a corrupt message or a
  // process speaking for another rank.
  Status add_from(int sender, const std::vector<Request>& requests, Clock::time_point now);
  // Adds one request under its own rank field (tests, and add_from after its check); a
  // rank outside [0, size) is ignored.
  void add(const Request& request, Clock::time_point now);
  // Responses for every name that all ranks that have not joined have submitted, in the
  // order the names were first seen; then the join response once every rank joined.
  std::vector<Response> take_ready();

  struct Stall {
    std::string name;
    std::vector<int> submitted;
    std::vector<int> missing;
    double seconds = 0;
  };
  // Names submitted by some ranks but not all, for longer than `seconds`.
  std::vector<Stall> stalls(Clock::time_point now, double seconds) const;
  bool empty() const { return entries_.empty(); }
  const std::vector<std::int32_t>& joined() const { return joined_; }

 private:
  struct Entry {
    std::vector<std::optional<Request>> by_rank;
    Clock::time_point first_seen;
  };
  bool is_joined(int rank) const;

  const int size_;
  std::unordered_map<std::string, Entry> entries_;
  std::vector<std::string> order_;    // names in first-seen order
  std::vector<std::int32_t> joined_;  // ranks in the order they joined
};

}  // namespace kolo::core
