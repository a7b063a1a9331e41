// The elastic driver's pure decisions (see elastic_plan.h).
#include "launcher/elastic_plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kolo::launcher {
namespace {

std::string trim(const std::string& s) {
  const char* ws = " \t\r";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

Status parse_discovery_output(const std::string& text, int default_slots,
                              std::vector<HostSlots>* out) {
  std::vector<HostSlots> hosts;
  std::stringstream in(text);
  std::string raw;
  int number = 0;
  while (std::getline(in, raw)) {
    ++number;
    const std::string line = trim(raw);
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return InvalidArgument("line " + std::to_string(number) + ", '" + line.substr(0, 200) +
                             "': " + why + " (expected HOST or HOST:SLOTS, one per line)");
    };
    if (line.find_first_of(", ") != std::string::npos) return bad("one host per line");
    // The host list parser checks the name and the slots (hosts.h), with --slots for a
    // host that gives none.
    std::vector<HostSlots> one;
    const bool has_slots = line.find(':') != std::string::npos;
    const std::string entry = has_slots ? line : line + ":" + std::to_string(default_slots);
    if (Status s = parse_host_list(entry, &one); !s.ok()) return bad(s.message());
    for (const auto& h : one) {
      auto it = std::find_if(hosts.begin(), hosts.end(),
                             [&](const HostSlots& x) { return x.host == h.host; });
      if (it == hosts.end()) {
        hosts.push_back(h);
      } else {
        it->slots += h.slots;
      }
    }
  }
  *out = std::move(hosts);
  return Status::OK();
}

double cooldown_seconds(const Cooldown& range, int count, double u) {
  const double d = range.lo * std::ldexp(1.0, std::min(count, 62)) + u * range.lo;
  return std::clamp(d, range.lo, range.hi);
}

Blacklist::Blacklist(std::optional<Cooldown> cooldown, std::function<double()> uniform)
    : cooldown_(cooldown), uniform_(std::move(uniform)) {}

std::optional<Deadline> Blacklist::add(const std::string& host, Deadline now) {
  Entry& e = hosts_[host];
  ++e.count;
  if (cooldown_) {
    e.until = now + seconds_duration(cooldown_seconds(*cooldown_, e.count, uniform_()));
  } else {
    e.until.reset();
  }
  return e.until;
}

bool Blacklist::blocked(const std::string& host, Deadline now) const {
  auto it = hosts_.find(host);
  if (it == hosts_.end() || it->second.count == 0) return false;
  return !it->second.until || now < *it->second.until;
}

bool Blacklist::blocked_for_good(const std::string& host, Deadline now) const {
  auto it = hosts_.find(host);
  return blocked(host, now) && !it->second.until;
}

std::set<std::string> Blacklist::blocked_of(const std::vector<HostSlots>& hosts,
                                            Deadline now) const {
  std::set<std::string> out;
  for (const auto& h : hosts) {
    if (blocked(h.host, now)) out.insert(h.host);
  }
  return out;
}

std::optional<Deadline> Blacklist::next_return(Deadline now) const {
  std::optional<Deadline> best;
  for (const auto& [host, e] : hosts_) {
    if (e.until && now < *e.until && (!best || *e.until < *best)) best = e.until;
  }
  return best;
}

void assign_local_ranks(std::vector<PlanMember>* members) {
  std::map<std::string, int> on_host;          // members so far per host
  std::vector<std::vector<std::string>> with;  // [local_rank]: hosts in first-member order
  for (auto& m : *members) {
    m.local_rank = on_host[m.host]++;
    if (static_cast<int>(with.size()) <= m.local_rank) with.resize(m.local_rank + 1);
    m.cross_rank = static_cast<int>(with[m.local_rank].size());
    with[m.local_rank].push_back(m.host);
  }
  for (auto& m : *members) {
    m.local_size = on_host[m.host];
    m.cross_size = static_cast<int>(with[m.local_rank].size());
  }
}

PlanResult next_plan(const PlanRequest& request) {
  const int cap = request.max_np > 0 ? request.max_np : INT32_MAX;
  std::map<std::string, int> free;
  for (const auto& h : request.hosts) free[h.host] += h.slots;
  PlanResult result;
  std::vector<PlanMember> members;
  for (const auto& w : request.living) {
    auto it = free.find(w.host);
    if (it == free.end() || it->second == 0 || static_cast<int>(members.size()) >= cap) {
      result.removed.push_back(w.id);
      continue;
    }
    --it->second;
    members.push_back({w.id, w.host});
  }
  int id = request.next_id;
  std::vector<PlanMember> started;
  for (const auto& h : request.hosts) {
    if (request.blocked.count(h.host) > 0) continue;
    for (int& left = free[h.host]; left > 0 && static_cast<int>(members.size()) < cap; --left) {
      members.push_back({id++, h.host});
    }
  }
  result.workers = static_cast<int>(members.size());
  if (result.workers < request.min_np) {
    result.wait = true;
    result.removed.clear();
    return result;
  }
  assign_local_ranks(&members);
  for (const auto& m : members) {
    if (m.id >= request.next_id) result.started.push_back(m);
  }
  result.members = std::move(members);
  return result;
}

std::string format_plan(const std::vector<PlanMember>& members) {
  std::string s;
  for (const auto& m : members) {
    s += std::to_string(m.id) + " " + m.host + " " + std::to_string(m.local_rank) + " " +
         std::to_string(m.local_size) + " " + std::to_string(m.cross_rank) + " " +
         std::to_string(m.cross_size) + "\n";
  }
  return s;
}

Status parse_plan(const std::string& text, std::vector<PlanMember>* out) {
  std::vector<PlanMember> members;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::stringstream words(line);
    PlanMember m;
    std::string extra;
    if (!(words >> m.id >> m.host >> m.local_rank >> m.local_size >> m.cross_rank >>
          m.cross_size) ||
        (words >> extra)) {
      return InvalidArgument("elastic plan line " + std::to_string(members.size() + 1) + ", '" +
                             line +
                             "': expected ID HOST LOCAL_RANK LOCAL_SIZE CROSS_RANK "
                             "CROSS_SIZE");
    }
    members.push_back(m);
  }
  *out = std::move(members);
  return Status::OK();
}

}  // namespace kolo::launcher
