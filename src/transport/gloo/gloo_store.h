// GlooStore: kolo's rendezvous Store (rendezvous/store.h) seen as the
// gloo::rendezvous::Store that gloo's connectFullMesh rendezvouses through.
//
// gloo reads peer keys with get() without waiting first, so get() here blocks until the
// key exists; every wait is bounded by the deadline the adapter was made with (the bound
// on creating a communicator), and by a wait()'s own timeout when that comes first.
// Failures throw gloo::IoException (what gloo's own stores throw) with kolo's message,
// and the first one is kept (error()) so the caller can return it as a Status.
//
// Not for: keys outside a rendezvous (kolo's own bookkeeping uses the kolo Store).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "rendezvous/store.h"

// gloo/rendezvous/store.h compiles on Debian's package (it includes logging.h only).
#include <gloo/rendezvous/store.h>

namespace kolo::transport::gloo_impl {

class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  // What ends a wait early: a sentence saying why the awaited ranks will never come ("the
  // launcher reports: rank 1 ... was killed by signal 9"), or "" to wait on.
  using Watch = std::function<std::string()>;
  // With a `watch`, every wait is cut into 200 ms slices and `watch` is asked between
  // them: a failure it names ends the wait as kPeerFailure with its sentence.
  GlooStore(std::shared_ptr<rendezvous::Store> store, Deadline deadline, Watch watch = {})
      : store_(std::move(store)), deadline_(deadline), watch_(std::move(watch)) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until `key` exists (bounded by the deadline).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The first failure (OK while there was none).
  const Status& error() const { return error_; }
  // store_->wait(keys, by), watched (also for kolo's own records after the mesh formed).
  Status watched_wait(const std::vector<std::string>& keys, Deadline by);

 private:
  [[noreturn]] void raise(Status s);

  std::shared_ptr<rendezvous::Store> store_;
  Deadline deadline_;
  Watch watch_;
  Status error_;
};

}  // namespace kolo::transport::gloo_impl
