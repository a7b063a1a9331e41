// Fuzz target: what the coordinator (rank 0) runs on bytes that peers send it. The input
// is cut into one request list per rank; each is decoded and added to the message table
// under the rank it came from, the ready responses are encoded, and the encoding must
// decode back to the same list. Any crash, sanitizer report or failed check is a bug.
//
// Built two ways: with clang's -fsanitize=fuzzer (scripts/fuzz.sh: coverage-guided, for
// a bounded time) and, everywhere else, with replay.cc's main, which runs the files of
// tests/fuzz/corpus/coordinator (a ctest). Not for: the data plane.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/message.h"
#include "core/negotiation.h"

namespace {

using kolo::core::Clock;

// Input layout: byte 0 picks the number of ranks (1-8); then, per rank, a 2-byte
// little-endian length and that many bytes (the rest of the input if it runs short).
std::vector<std::string> split(const std::uint8_t* data, std::size_t size, int* ranks) {
  *ranks = size > 0 ? 1 + data[0] % 8 : 1;
  std::vector<std::string> lists;
  std::size_t at = size > 0 ? 1 : 0;
  for (int r = 0; r < *ranks; ++r) {
    std::size_t len = 0;
    if (at + 2 <= size) {
      len = data[at] | (std::size_t{data[at + 1]} << 8);
      at += 2;
    }
    len = std::min(len, size - at);
    lists.emplace_back(reinterpret_cast<const char*>(data + at), len);
    at += len;
  }
  return lists;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "coordinator_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int ranks = 1;
  const std::vector<std::string> lists = split(data, size, &ranks);
  kolo::core::MessageTable table(ranks);
  const auto now = Clock::time_point{} + std::chrono::hours(1);
  for (int r = 0; r < ranks; ++r) {
    std::vector<kolo::core::Request> reqs;
    if (!kolo::core::decode_requests(lists[r], &reqs).ok()) continue;
    // A refused list adds nothing; the rest of the table must stay usable.
    (void)table.add_from(r, reqs, now);
  }
  (void)table.stalls(now + std::chrono::seconds(5), 1.0);
  kolo::core::ResponseList list;
  list.responses = table.take_ready();
  const std::string encoded = kolo::core::encode_response_list(list);
  kolo::core::ResponseList back;
  check(kolo::core::decode_response_list(encoded, &back).ok(), "response list does not decode");
  check(back.responses.size() == list.responses.size(), "response count changed");
  for (std::size_t i = 0; i < back.responses.size(); ++i) {
    check(back.responses[i].name == list.responses[i].name, "response name changed");
    check(back.responses[i].error == list.responses[i].error, "response error changed");
  }
  // The peers' side: any bytes as a response list must be refused or decoded cleanly.
  kolo::core::ResponseList any;
  (void)kolo::core::decode_response_list(std::string(reinterpret_cast<const char*>(data), size),
                                         &any);
  return 0;
}
