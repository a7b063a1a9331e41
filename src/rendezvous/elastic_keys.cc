#include "rendezvous/elastic_keys.h"

#include <sstream>

namespace kolo::rendezvous::elastic_keys {

std::string plan_key(std::int64_t generation) {
  return "elastic/plan/" + std::to_string(generation);
}

std::string generation_prefix(std::int64_t generation) {
  return "elastic/" + std::to_string(generation);
}

std::string launcher_prefix(std::int64_t generation) {
  return generation_prefix(generation) + "/launcher";
}

std::string arrived_key(std::int64_t generation, int rank) {
  return generation_prefix(generation) + "/arrived/" + std::to_string(rank);
}

std::string reset_requests_key(std::int64_t generation) {
  return generation_prefix(generation) + "/reset_requests";
}

std::string format_plan(const std::vector<Member>& members) {
  std::string text;
  for (const Member& m : members) {
    text += std::to_string(m.id) + " " + m.host + " " + std::to_string(m.local_rank) + " " +
            std::to_string(m.local_size) + " " + std::to_string(m.cross_rank) + " " +
            std::to_string(m.cross_size) + "\n";
  }
  return text;
}

Status parse_plan(const std::string& text, std::vector<Member>* members) {
  members->clear();
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream fields(line);
    Member m;
    std::string extra;
    if (!(fields >> m.id >> m.host >> m.local_rank >> m.local_size >> m.cross_rank >>
          m.cross_size) ||
        (fields >> extra) || m.id < 0 || m.local_rank < 0 || m.local_rank >= m.local_size ||
        m.cross_rank < 0 || m.cross_rank >= m.cross_size) {
      return InvalidArgument("elastic plan line " + std::to_string(number) + " '" + line +
                             "' is not '<id> <host> <local_rank> <local_size> <cross_rank> "
                             "<cross_size>' (kolorun and this worker are different versions?)");
    }
    if (rank_of(*members, m.id) >= 0) {
      return InvalidArgument("elastic plan line " + std::to_string(number) + ": worker id " +
                             std::to_string(m.id) + " appears twice");
    }
    members->push_back(std::move(m));
  }
  return Status::OK();
}

int rank_of(const std::vector<Member>& members, std::int64_t id) {
  for (std::size_t r = 0; r < members.size(); ++r) {
    if (members[r].id == id) return static_cast<int>(r);
  }
  return -1;
}

Status generations(Store& store, std::int64_t* count) {
  // add(0) reads a counter that may not exist yet (0) without a separate existence check.
  return store.add(kGenerationsKey, 0, count);
}

}  // namespace kolo::rendezvous::elastic_keys
