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

std::vector<char> GlooStore::get(const std::string& key) {
  std::string value;
  const Status s = store_->get(key, deadline_, &value);
  if (!s.ok()) raise(s);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  const Status s = store_->wait(keys, deadline_);
  if (!s.ok()) raise(s);
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  Deadline by = deadline_;
  const auto now = Clock::now();
  if (timeout.count() >= 0 && timeout < Deadline::max() - now) by = std::min(by, now + timeout);
  const Status s = store_->wait(keys, by);
  if (!s.ok()) raise(s);
}

}  // namespace kolo::transport::gloo_impl
