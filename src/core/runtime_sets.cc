// Process sets in the runtime: the API's changes (add, remove, look up), negotiated like
// any operation, and their application on the background thread (a set's communicator and
// controller). Not for: the loop itself (runtime_loop.cc).
#include "core/runtime.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "common/convert.h"
#include "common/deadline.h"
#include "common/format.h"
#include "common/logging.h"
#include "core/autotune.h"
#include "core/controller.h"
#include "core/executor.h"
#include "core/fusion.h"
#include "core/request_builder.h"
#include "core/runtime_internal.h"

namespace kolo::core {

Status Runtime::change_process_sets(Request request, int* id) {
  {
    // Named by the number of changes that succeeded: a refused change leaves no trace,
    // also on a rank that took no part in it (one that had joined gets the refusal's
    // response but made no call, so a count of calls would drift apart between ranks).
    std::lock_guard<std::mutex> lock(mu_);
    request.name = "kolo.process_set." + std::to_string(set_changes_);
  }
  std::shared_ptr<detail::HandleState> state;
  KOLO_RETURN_IF_ERROR(submit_entry(std::move(request), {}, {}, &state));
  // Bounded: the runtime fails every pending operation on a peer failure, a stall
  // shutdown or shutdown().
  const Handle handle(state);
  while (!handle.wait_for(std::chrono::seconds(1))) {
  }
  if (!handle.ok()) return Status(handle.error_code(), handle.error_message());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++set_changes_;
  }
  if (id) *id = state->process_set_id;
  return Status::OK();
}

Status Runtime::add_process_set(std::vector<int> ranks, ProcessSet* out) {
  int id = -1;
  KOLO_RETURN_IF_ERROR(change_process_sets(add_process_set_request(std::move(ranks), ""), &id));
  return process_set(id, out);
}

Status Runtime::remove_process_set(int id) {
  if (id == kGlobalProcessSet) {  // also refused by negotiation; said here without a round
    return InvalidArgument("remove_process_set: the global process set (id 0) cannot be removed");
  }
  return change_process_sets(remove_process_set_request(id, ""), nullptr);
}

Status Runtime::process_set(int id, ProcessSet* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = sets_.find(id);
  if (it == sets_.end()) {
    return InvalidArgument("process set " + std::to_string(id) +
                           (id > 0 && id < next_set_id_ ? " was removed" : " does not exist"));
  }
  *out = ProcessSet(id, it->second.ranks, it->second.rank);
  return Status::OK();
}

Status Runtime::apply_set_change(Loop& loop, const Response& r) {
  std::shared_ptr<Entry> entry = take(r.name);
  Status s;
  int id = -1;
  if (r.is_error()) {
    s = Status(r.error_code, r.error);
  } else if (r.op == OpType::kAddProcessSet) {
    s = add_set(loop, r, &id);
  } else {
    s = remove_set(loop, r);
  }
  s = elastic_view(s);
  if (entry) {
    entry->handle->process_set_id = id;
    entry->handle->complete(s.code(), s.message());
  }
  return ends_runtime(s) ? s : Status::OK();
}

Status Runtime::add_set(Loop& loop, const Response& r, int* id) {
  const std::vector<int> ranks(r.splits.begin(), r.splits.end());
  const std::string what = std::string(op_name(r.op)) + " '" + r.name + "'";
  {
    // Every rank knows the same sets at this point of the order: the same verdict.
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [other, info] : sets_) {
      if (info.ranks != ranks) continue;
      if (other == kGlobalProcessSet) {
        return InvalidArgument(what + ": " + ranks_string(ranks) +
                               " are every rank of the job: a duplicate of the global process "
                               "set (id 0); use kolo::global_process_set()");
      }
      return InvalidArgument(what + ": process set " + std::to_string(other) + " already has " +
                             ranks_string(ranks) + "; use it, or remove it first");
    }
  }
  std::unique_ptr<transport::Communicator> sub;
  Status made = comm_->subset(ranks, &sub);
  if (made.code() == ErrorCode::kPeerFailure) return made;
  if (!made.ok()) {
    KOLO_LOG(kWarning, "process_set") << what << ": " << made.message();
  }
  // One verdict on every rank, also when only some could make their communicator.
  std::vector<std::uint64_t> ok = {made.ok() ? 1u : 0u};
  KOLO_RETURN_IF_ERROR(comm_->control_and(ok, transport::Clock::now() + loop.peer_timeout));
  if (ok[0] == 0) {
    return Status(
        made.ok() ? ErrorCode::kUnsupported : made.code(),
        what + ": the " + comm_->name() + " transport could not make a communicator over " +
            ranks_string(ranks) + ": " +
            (made.ok() ? "it failed on another rank (see that rank's log)" : made.message()));
  }
  int mine = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == topology_.rank) mine = static_cast<int>(i);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    *id = next_set_id_++;
    sets_[*id] = SetInfo{ranks, mine};
  }
  if (sub) loop.sets.try_emplace(*id, config_, comm_.get(), std::move(sub), *id, ranks);
  KOLO_LOG(kInfo, "process_set") << "process set " << *id << ": " << ranks_string(ranks)
                                 << (mine >= 0
                                         ? " (this rank is its rank " + std::to_string(mine) + ")"
                                         : " (this rank is not a member)");
  return Status::OK();
}

Status Runtime::remove_set(Loop& loop, const Response& r) {
  const int id = r.root;
  std::vector<std::shared_ptr<Entry>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sets_.count(id)) {
      return InvalidArgument(
          std::string(op_name(r.op)) + " '" + r.name + "': process set " + std::to_string(id) +
          (id > 0 && id < next_set_id_ ? " was already removed" : " does not exist"));
    }
    sets_.erase(id);
    for (auto it = table_.begin(); it != table_.end();) {
      if (it->second->request.process_set == id) {
        pending.push_back(std::move(it->second));
        it = table_.erase(it);
      } else {
        ++it;
      }
    }
  }
  loop.sets.erase(id);  // its controller, then its communicator
  for (auto& entry : pending) {
    entry->handle->complete(ErrorCode::kInvalidArgument,
                            std::string(op_name(entry->request.op)) + " '" + entry->request.name +
                                "': process set " + std::to_string(id) +
                                " was removed (kolo::remove_process_set) while this operation "
                                "was pending on rank " +
                                std::to_string(topology_.rank));
  }
  KOLO_LOG(kInfo, "process_set") << "process set " << id << " removed";
  return Status::OK();
}

}  // namespace kolo::core
