// GlooStore (gloo_store.h): the adapter from kolo's Store to gloo's.
#include "transport/gloo/gloo_store.h"

#include <algorithm>

#include <gloo/common/error.h>

namespace kolo::transport::gloo_impl {

void GlooStore::raise(Status s) {
  if (error_.ok()) error_ = s;
  throw ::gloo::IoException(s.message());
}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  const Status s = store_->set(key, std::string(data.begin(), data.end()));
  if (!s.ok()) raise(s);
}

Status GlooStore::watched_wait(const std::vector<std::string>& keys, Deadline by) {
  if (!watch_) return store_->wait(keys, by);
  const Deadline start = Clock::now();
  while (true) {
    const Deadline slice = std::min(by, Clock::now() + std::chrono::milliseconds(200));
    const Status s = store_->wait(keys, slice);
    // Done, or failed before the slice ended (the store is gone, a bad key): as it is.
    if (s.ok() || s.code() != ErrorCode::kPeerFailure || Clock::now() < slice) return s;
    if (const std::string why = watch_(); !why.empty()) return PeerFailure(why);
    if (Clock::now() >= by) {
      // The whole wait's message, naming the keys still missing.
      std::vector<std::string> missing;
      for (const auto& key : keys) {
        bool there = false;
        if (store_->check({key}, &there).ok() && !there) missing.push_back(key);
      }
      return rendezvous::missing_keys_error(store_->describe(), missing.empty() ? keys : missing,
                                            keys.size(), Clock::now() - start);
    }
  }
}

std::vector<char> GlooStore::get(const std::string& key) {
  std::string value;
  Status s = watched_wait({key}, deadline_);
  if (s.ok()) s = store_->get(key, deadline_, &value);
  if (!s.ok()) raise(s);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  const Status s = watched_wait(keys, deadline_);
  if (!s.ok()) raise(s);
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  Deadline by = deadline_;
  const auto now = Clock::now();
  if (timeout.count() >= 0 && timeout < Deadline::max() - now) by = std::min(by, now + timeout);
  const Status s = watched_wait(keys, by);
  if (!s.ok()) raise(s);
}

}  // namespace kolo::transport::gloo_impl
