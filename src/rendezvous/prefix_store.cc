#include "rendezvous/prefix_store.h"

#include <utility>

namespace kolo::rendezvous {

PrefixStore::PrefixStore(std::shared_ptr<Store> base, std::string prefix)
    : base_(std::move(base)), prefix_(std::move(prefix)) {}

std::string PrefixStore::describe() const {
  return "prefix " + quote_key(prefix_) + " of " + base_->describe();
}

Status PrefixStore::map(const std::string& key, std::string* full) const {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  if (prefix_.empty()) {
    return InvalidArgument("rendezvous: a prefix view of " + base_->describe() +
                           " has an empty prefix; give each view a name");
  }
  *full = prefix_ + "/" + key;
  return Status::OK();
}

Status PrefixStore::map(const std::vector<std::string>& keys,
                        std::vector<std::string>* full) const {
  full->resize(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) KOLO_RETURN_IF_ERROR(map(keys[i], &(*full)[i]));
  return Status::OK();
}

Status PrefixStore::set(const std::string& key, const std::string& value) {
  std::string full;
  KOLO_RETURN_IF_ERROR(map(key, &full));
  return base_->set(full, value);
}

Status PrefixStore::get(const std::string& key, Deadline deadline, std::string* value) {
  std::string full;
  KOLO_RETURN_IF_ERROR(map(key, &full));
  return base_->get(full, deadline, value);
}

Status PrefixStore::try_get(const std::string& key, std::string* value, bool* found) {
  std::string full;
  KOLO_RETURN_IF_ERROR(map(key, &full));
  return base_->try_get(full, value, found);
}

Status PrefixStore::check(const std::vector<std::string>& keys, bool* all_exist) {
  std::vector<std::string> full;
  KOLO_RETURN_IF_ERROR(map(keys, &full));
  return base_->check(full, all_exist);
}

Status PrefixStore::add(const std::string& key, std::int64_t delta, std::int64_t* new_value) {
  std::string full;
  KOLO_RETURN_IF_ERROR(map(key, &full));
  return base_->add(full, delta, new_value);
}

Status PrefixStore::compare_set(const std::string& key, const std::string& expected,
                                const std::string& desired, std::string* actual) {
  std::string full;
  KOLO_RETURN_IF_ERROR(map(key, &full));
  return base_->compare_set(full, expected, desired, actual);
}

Status PrefixStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  std::vector<std::string> full;
  KOLO_RETURN_IF_ERROR(map(keys, &full));
  return base_->wait(full, deadline);
}

Status PrefixStore::erase(const std::string& key, bool* existed) {
  std::string full;
  KOLO_RETURN_IF_ERROR(map(key, &full));
  return base_->erase(full, existed);
}

}  // namespace kolo::rendezvous
