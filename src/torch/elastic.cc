// kolo::elastic's training loop (run) and State's collective parts: commit, the check for
// new workers, and sync's choice of root (kolo/elastic.h). What a state holds and how it
// is copied is TorchState's (torch_state.cc); generations of the runtime are src/core's.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "kolo/elastic.h"

namespace kolo::elastic {
namespace {

int size_or_unknown() { return kolo::is_initialized() ? kolo::size() : -1; }

}  // namespace

const char* HostsUpdatedInterrupt::what() const noexcept {
  return "kolo::elastic::HostsUpdatedInterrupt: kolorun has a new set of workers; "
         "kolo::elastic::run() resets at this commit (let it reach run())";
}

void State::commit() {
  save();
  check_host_updates();
}

void State::save() {
  save_state();
  ++commits_;
}

void State::restore() { restore_state(); }

void State::check_host_updates() {
  if (kolo::elastic::hosts_updated()) throw HostsUpdatedInterrupt();
}

void State::register_reset_callbacks(std::vector<std::function<void()>> callbacks) {
  for (auto& c : callbacks) callbacks_.push_back(std::move(c));
}

void State::on_reset() {
  for (const auto& c : callbacks_) {
    if (c) c();
  }
}

void State::sync() {
  // Every rank takes part, whatever its age: the root is decided from everyone's answer,
  // never by a rank alone (horovod#3494: survivors that skipped the sync while new workers
  // ran it waited for different collectives).
  const torch::Tensor all =
      kolo::allgather(torch::tensor({commits_}, torch::kLong), {.name = "elastic.sync.ages"});
  std::vector<std::int64_t> ages(static_cast<std::size_t>(all.numel()));
  std::memcpy(ages.data(), all.data_ptr<std::int64_t>(), ages.size() * sizeof(std::int64_t));
  const int root = detail::choose_sync_root(ages);
  KOLO_LOG(kDebug, "elastic") << "sync from rank " << root << " (commit " << ages[root] << ")";
  sync_from(root);
  commits_ = ages[root];
}

bool run(State& state, const std::function<void(State&)>& train) {
  if (!kolo::elastic::enabled()) {
    state.sync();
    train(state);
    return true;
  }
  return detail::run(state, train, [] { return kolo::elastic::reset(); });
}

namespace detail {

int choose_sync_root(const std::vector<std::int64_t>& ages) {
  if (ages.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "elastic: choose_sync_root of no ranks");
  }
  // max_element returns the first of equal largest values: the lowest such rank.
  return static_cast<int>(std::max_element(ages.begin(), ages.end()) - ages.begin());
}

bool run(State& state, const std::function<void(State&)>& train,
         const std::function<bool()>& reset) {
  for (;;) {
    try {
      state.sync();
      train(state);
      return true;
    } catch (const WorkersChanged& e) {
      KOLO_LOG(kWarning, "elastic") << "restoring commit " << state.commits() << ": " << e.what();
      state.restore();
    } catch (const HostsUpdatedInterrupt&) {
      KOLO_LOG(kInfo, "elastic") << "the set of workers changes at commit " << state.commits();
    }
    const int before = size_or_unknown();
    for (;;) {
      try {
        if (!reset()) {
          KOLO_LOG(kInfo, "elastic") << "this worker is not part of the job any more";
          return false;
        }
        break;
      } catch (const WorkersChanged& e) {
        // The next generation lost a worker while forming: wait for the one after it
        // (each reset() is bounded by KOLO_ELASTIC_TIMEOUT_SECONDS, the number of
        // generations by kolorun's --reset-limit).
        KOLO_LOG(kWarning, "elastic") << "the next set of workers did not form: " << e.what();
      }
    }
    KOLO_LOG(kInfo, "elastic") << "reset: " << before << " -> " << size_or_unknown()
                               << " workers (generation " << kolo::elastic::generation() << ")";
    state.on_reset();
  }
}

}  // namespace detail
}  // namespace kolo::elastic
