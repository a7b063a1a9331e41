// ElasticPlan: the decisions of kolorun's elastic driver (elastic_driver.h) that need no
// process: reading a host discovery script's output, the blacklist of hosts where a
// worker failed (with Horovod's cooldown), and the next generation's plan from who is
// alive and which slots exist. The plan's text form is docs/elastic.md's `elastic/plan/<g>`.
//
// Pure: the clock's "now" and the random numbers are arguments, so every decision is
// unit-tested (elastic_plan_test.cc). Not for: running the script, starting or stopping
// workers, or the store (elastic_driver.h).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "launcher/hosts.h"

namespace kolo::launcher {

// Parses a discovery script's stdout: one `host` or `host:slots` per line (`slots` a whole
// number >= 1; a host without it gets `default_slots`, --slots); blank lines are skipped;
// a host named twice gets the sum. An error quotes the line and its number ("line 2,
// 'a:x': ..."). Empty output is no hosts, not an error.
Status parse_discovery_output(const std::string& text, int default_slots,
                              std::vector<HostSlots>* out);

// --blacklist-cooldown-range LO HI, in seconds.
struct Cooldown {
  double lo = 0, hi = 0;
};

// How long a host stays blacklisted the `count`-th time (1, 2, ...), as Horovod's
// HostState does: lo * 2^count + u * lo, clamped to [lo, hi]; `u` uniform in [0, 1).
double cooldown_seconds(const Cooldown& range, int count, double u);

// The hosts where a worker failed: no new worker starts there, for good or (with a
// cooldown) until its cooldown ends. Owned by the driver's one thread.
class Blacklist {
 public:
  // No cooldown: blacklisted for good. `uniform` gives numbers in [0, 1) (tests: fixed).
  Blacklist(std::optional<Cooldown> cooldown, std::function<double()> uniform);

  // Blacklists `host` at `now` (again: a longer cooldown); returns when it comes back
  // (nullopt: never).
  std::optional<Deadline> add(const std::string& host, Deadline now);
  bool blocked(const std::string& host, Deadline now) const;
  // Blocked now and never coming back.
  bool blocked_for_good(const std::string& host, Deadline now) const;
  // The hosts of `hosts` blocked at `now`.
  std::set<std::string> blocked_of(const std::vector<HostSlots>& hosts, Deadline now) const;
  // The earliest cooldown end after `now` (nullopt: none pending).
  std::optional<Deadline> next_return(Deadline now) const;

 private:
  struct Entry {
    int count = 0;
    std::optional<Deadline> until;  // nullopt: for good
  };
  std::optional<Cooldown> cooldown_;
  std::function<double()> uniform_;
  std::map<std::string, Entry> hosts_;
};

// One rank of a generation: docs/elastic.md's plan line.
struct PlanMember {
  int id = 0;  // KOLO_ELASTIC_ID
  std::string host;
  int local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;

  bool operator==(const PlanMember&) const = default;
};

struct LivingWorker {
  int id = 0;
  std::string host;
};

struct PlanRequest {
  // The workers alive (and not being removed), in their previous rank order, then those
  // started for the previous plan that have no rank yet.
  std::vector<LivingWorker> living;
  // The hosts the job may use now, in the order they were first listed, with slots.
  std::vector<HostSlots> hosts;
  // Hosts where no new worker may start (the blacklist): their living workers stay.
  std::set<std::string> blocked;
  int min_np = 1;
  int max_np = 0;   // at most this many workers; 0: as many as there are slots
  int next_id = 0;  // the id the first new worker gets
};

struct PlanResult {
  // Fewer than min_np workers fit: nothing changes, the driver waits for slots.
  bool wait = false;
  int workers = 0;                  // how many the plan holds (or would: below min_np)
  std::vector<PlanMember> members;  // in rank order; empty when waiting
  std::vector<PlanMember> started;  // the members that are new (ids from next_id on)
  std::vector<int> removed;         // living workers left out (host gone, slots, max)
};

// The next plan: the living workers first, in their order, where their host is still
// listed and has a slot for them (a blacklisted host keeps its survivors), up to max_np;
// then new workers for the free slots of hosts not blocked, host by host in list order,
// up to max_np. local_rank/local_size count the members on the same host in rank order;
// cross_rank is the host's index among the hosts that have a member with that local_rank
// (in order of their first member), cross_size how many such hosts there are.
PlanResult next_plan(const PlanRequest& request);

// The members' local and cross ranks (as next_plan says) from their hosts, in rank order.
void assign_local_ranks(std::vector<PlanMember>* members);

// `elastic/plan/<g>`'s value: "<id> <host> <local_rank> <local_size> <cross_rank>
// <cross_size>\n" per rank; and back (kInvalidArgument naming the line).
std::string format_plan(const std::vector<PlanMember>& members);
Status parse_plan(const std::string& text, std::vector<PlanMember>* out);

}  // namespace kolo::launcher
