// PrefixStore: a view of another Store in which every key is "<prefix>/<key>", so that
// several users of one store (a job's generations, process sets, the transports) cannot
// see or overwrite each other's keys.
//
// Views nest: PrefixStore(PrefixStore(s, "gen/3"), "gloo") writes "gen/3/gloo/<key>".
// Messages from the store below name the full keys. Not for: access control (every
// holder of the store below can read every key).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace kolo::rendezvous {

class PrefixStore : public Store {
 public:
  // The view shares `base` (not null). An empty `prefix` makes every operation fail with
  // kInvalidArgument (it would be the store itself, not a separate namespace).
  PrefixStore(std::shared_ptr<Store> base, std::string prefix);

  Status set(const std::string& key, const std::string& value) override;
  Status get(const std::string& key, Deadline deadline, std::string* value) override;
  Status try_get(const std::string& key, std::string* value, bool* found) override;
  Status check(const std::vector<std::string>& keys, bool* all_exist) override;
  Status add(const std::string& key, std::int64_t delta, std::int64_t* new_value) override;
  Status compare_set(const std::string& key, const std::string& expected,
                     const std::string& desired, std::string* actual) override;
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Status erase(const std::string& key, bool* existed) override;
  std::string describe() const override;

  const std::string& prefix() const { return prefix_; }

 private:
  // `key` as the store below sees it; kInvalidArgument for an empty key.
  Status map(const std::string& key, std::string* full) const;
  Status map(const std::vector<std::string>& keys, std::vector<std::string>* full) const;

  const std::shared_ptr<Store> base_;
  const std::string prefix_;
};

}  // namespace kolo::rendezvous
