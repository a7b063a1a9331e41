#include "startup/elastic_membership.h"

#include <algorithm>
#include <chrono>

#include "common/deadline.h"
#include "common/format.h"

namespace kolo::core {

namespace ek = rendezvous::elastic_keys;

namespace {

// How often a wait looks for a newer plan or the job's end (store waits return at once
// when their keys appear; this bounds only how late a newer plan is seen).
constexpr auto kSlice = std::chrono::milliseconds(100);

Deadline slice_end(Deadline deadline) { return std::min(deadline, Clock::now() + kSlice); }

// The job is ending (elastic/finished): *why gets the sentence.
Status finished(rendezvous::Store& store, bool* done, std::string* why) {
  std::string text;
  KOLO_RETURN_IF_ERROR(store.try_get(ek::kFinishedKey, &text, done));
  if (*done) *why = "the elastic job is ending (" + text + ")";
  return Status::OK();
}

// Waits until a plan of generation `from` or newer exists; *newest is the newest one.
Status wait_for_plan(rendezvous::Store& store, std::int64_t from, Deadline deadline,
                     double timeout_s, std::int64_t* newest, bool* done, std::string* why) {
  for (;;) {
    std::int64_t count = 0;
    KOLO_RETURN_IF_ERROR(ek::generations(store, &count));
    if (count > from) {
      *newest = count - 1;
      return Status::OK();
    }
    KOLO_RETURN_IF_ERROR(finished(store, done, why));
    if (*done) return Status::OK();
    if (Clock::now() >= deadline) {
      return PeerFailure("no membership (generation " + std::to_string(from) +
                         ") came from kolorun within " + (number_string(timeout_s) + " s") +
                         " (KOLO_ELASTIC_TIMEOUT_SECONDS): is kolorun's elastic driver still "
                         "running, and does the job have --min-np usable slots?");
    }
    // Returns once the plan key exists (or the slice ends): no busy polling.
    const Status s = store.wait({ek::plan_key(from)}, slice_end(deadline));
    if (!s.ok() && s.code() != ErrorCode::kPeerFailure) return s;
  }
}

}  // namespace

Status newer_plan_exists(rendezvous::Store& store, std::int64_t generation, bool* newer) {
  std::int64_t count = 0;
  KOLO_RETURN_IF_ERROR(ek::generations(store, &count));
  *newer = count > generation + 1;
  return Status::OK();
}

Status join_generation(rendezvous::Store& store, std::int64_t id, std::int64_t from,
                       double timeout_s, ElasticMembership* out) {
  *out = ElasticMembership{};
  const Deadline deadline = deadline_after(timeout_s);
  for (;;) {
    std::int64_t g = -1;
    bool done = false;
    KOLO_RETURN_IF_ERROR(wait_for_plan(store, from, deadline, timeout_s, &g, &done, &out->why));
    if (done) {
      out->removed = true;
      return Status::OK();
    }
    std::string text;
    KOLO_RETURN_IF_ERROR(store.get(ek::plan_key(g), deadline, &text));
    std::vector<ek::Member> members;
    KOLO_RETURN_IF_ERROR(ek::parse_plan(text, &members));
    const int rank = ek::rank_of(members, id);
    if (rank < 0) {
      out->removed = true;
      out->why = "kolorun's membership of generation " + std::to_string(g) +
                 " does not include this worker (id " + std::to_string(id) +
                 "): its host left the job, or the job has --max-np workers without it";
      return Status::OK();
    }
    KOLO_RETURN_IF_ERROR(store.set(ek::arrived_key(g, rank), "arrived"));
    std::vector<std::string> keys;
    for (int r = 0; r < static_cast<int>(members.size()); ++r) {
      keys.push_back(ek::arrived_key(g, r));
    }
    bool superseded = false;
    for (;;) {
      const Status s = store.wait(keys, slice_end(deadline));
      if (s.ok()) break;
      if (s.code() != ErrorCode::kPeerFailure) return s;
      bool newer = false;
      KOLO_RETURN_IF_ERROR(newer_plan_exists(store, g, &newer));
      if (newer) {
        superseded = true;  // a member failed (or more came) meanwhile: take the newest
        break;
      }
      KOLO_RETURN_IF_ERROR(finished(store, &done, &out->why));
      if (done) {
        out->removed = true;
        return Status::OK();
      }
      if (Clock::now() >= deadline) {
        std::string missing;
        for (int r = 0; r < static_cast<int>(members.size()); ++r) {
          bool there = false;
          KOLO_RETURN_IF_ERROR(store.check({keys[r]}, &there));
          if (there) continue;
          if (!missing.empty()) missing += ", ";
          missing += "rank " + std::to_string(r) + " (worker id " + std::to_string(members[r].id) +
                     " on " + members[r].host + ")";
        }
        return PeerFailure("generation " + std::to_string(g) +
                           " of the elastic job did not form within " +
                           (number_string(timeout_s) + " s") +
                           " (KOLO_ELASTIC_TIMEOUT_SECONDS): " + missing + " never arrived");
      }
    }
    if (superseded) {
      from = g + 1;
      continue;
    }
    out->generation = g;
    out->rank = rank;
    out->size = static_cast<int>(members.size());
    out->local_rank = members[rank].local_rank;
    out->local_size = members[rank].local_size;
    out->cross_rank = members[rank].cross_rank;
    out->cross_size = members[rank].cross_size;
    out->members = std::move(members);
    return Status::OK();
  }
}

}  // namespace kolo::core
