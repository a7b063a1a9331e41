#include "rendezvous/memory_store.h"

#include <algorithm>

namespace kolo::rendezvous {

Status MemoryStore::set(const std::string& key, const std::string& value) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
  return Status::OK();
}

Status MemoryStore::get(const std::string& key, Deadline deadline, std::string* value) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  std::unique_lock<std::mutex> lock(mu_);
  KOLO_RETURN_IF_ERROR(wait_locked(lock, {key}, deadline));
  *value = values_.at(key);
  return Status::OK();
}

Status MemoryStore::try_get(const std::string& key, std::string* value, bool* found) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = values_.find(key);
  *found = it != values_.end();
  if (*found) *value = it->second;
  return Status::OK();
}

Status MemoryStore::check(const std::vector<std::string>& keys, bool* all_exist) {
  for (const auto& key : keys) KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  std::lock_guard<std::mutex> lock(mu_);
  *all_exist = missing(keys).empty();
  return Status::OK();
}

Status MemoryStore::add(const std::string& key, std::int64_t delta, std::int64_t* new_value) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = values_.find(key);
    const std::string* current = it == values_.end() ? nullptr : &it->second;
    KOLO_RETURN_IF_ERROR(add_to_counter(describe(), key, current, delta, new_value));
    values_[key] = std::to_string(*new_value);
  }
  changed_.notify_all();
  return Status::OK();
}

Status MemoryStore::compare_set(const std::string& key, const std::string& expected,
                                const std::string& desired, std::string* actual) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = values_.find(key);
    const bool swap = it == values_.end() ? expected.empty() : it->second == expected;
    if (!swap) {
      *actual = it == values_.end() ? std::string() : it->second;
      return Status::OK();
    }
    values_[key] = desired;
    *actual = desired;
  }
  changed_.notify_all();
  return Status::OK();
}

Status MemoryStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (const auto& key : keys) KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  std::unique_lock<std::mutex> lock(mu_);
  return wait_locked(lock, keys, deadline);
}

Status MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock,
                                const std::vector<std::string>& keys, Deadline deadline) {
  const Deadline start = Clock::now();
  while (true) {
    std::vector<std::string> absent = missing(keys);
    if (absent.empty()) return Status::OK();
    if (Clock::now() >= deadline) {
      return missing_keys_error(describe(), absent, keys.size(),
                                std::max(deadline - start, Clock::duration::zero()));
    }
    changed_.wait_until(lock, deadline);
  }
}

Status MemoryStore::erase(const std::string& key, bool* existed) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  std::lock_guard<std::mutex> lock(mu_);
  *existed = values_.erase(key) > 0;
  return Status::OK();
}

std::vector<std::string> MemoryStore::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& key : keys) {
    if (values_.find(key) == values_.end()) out.push_back(key);
  }
  return out;
}

}  // namespace kolo::rendezvous
