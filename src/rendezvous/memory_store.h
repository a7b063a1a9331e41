// MemoryStore: a Store held in the memory of one process, for tests and for jobs whose
// ranks are threads of one process (the inproc transport).
//
// Waiters sleep on a condition variable that every write wakes, so a blocking get returns
// as soon as the key is set. Not for: processes (file_store.h; the TCP store).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "rendezvous/store.h"

namespace kolo::rendezvous {

class MemoryStore : public Store {
 public:
  MemoryStore() = default;

  Status set(const std::string& key, const std::string& value) override;
  Status get(const std::string& key, Deadline deadline, std::string* value) override;
  Status try_get(const std::string& key, std::string* value, bool* found) override;
  Status check(const std::vector<std::string>& keys, bool* all_exist) override;
  Status add(const std::string& key, std::int64_t delta, std::int64_t* new_value) override;
  Status compare_set(const std::string& key, const std::string& expected,
                     const std::string& desired, std::string* actual) override;
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Status erase(const std::string& key, bool* existed) override;
  std::string describe() const override { return "memory store"; }

 private:
  // Waits on changed_ (which releases `lock`, a lock of mu_) until every key exists.
  Status wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                     Deadline deadline) KOLO_REQUIRES(mu_);
  // The keys of `keys` not in the map, in order.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const KOLO_REQUIRES(mu_);

  mutable std::mutex mu_;
  std::condition_variable changed_;  // notified after every write
  std::map<std::string, std::string> values_ KOLO_GUARDED_BY(mu_);
};

}  // namespace kolo::rendezvous
