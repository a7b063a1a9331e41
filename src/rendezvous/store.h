// The rendezvous Store: a small key-value store that the processes of one job share to
// find each other (addresses, ranks, generation counters) before any transport exists.
//
// Keys are non-empty strings; values are arbitrary bytes (held in std::string). Every
// implementation is thread-safe and linearizable: each operation takes effect at one
// instant between its call and its return.
//
// Waiting: get() and wait() block until keys exist or the caller's Deadline passes; they
// then fail with ErrorCode::kPeerFailure and a message naming the keys still missing, the
// store, and how long they waited (a missing key means a process that should have set it
// has not). The other operations wait for nobody; what they may block on (a lock file, a
// socket) is bounded by the implementation's own limit (FileStoreOptions::lock_timeout_s,
// the TCP client's io_timeout_s).
//
// Implementations: memory_store.h (threads of one process; tests), file_store.h (a
// directory on a local or shared file system), tcp_store.h with tcp_store_server.h (a
// server in one process, clients anywhere, with a per-job secret), prefix_store.h (a view
// that puts a prefix before every key). Not for: bulk data (values are read whole; keep
// them small) or anything that must outlive the job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"

namespace kolo::rendezvous {

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any value it had.
  virtual Status set(const std::string& key, const std::string& value) = 0;

  // Waits until `key` exists, then reads its value into *value. Past `deadline`: a
  // kPeerFailure naming the key. (A deadline already passed still looks once.)
  virtual Status get(const std::string& key, Deadline deadline, std::string* value) = 0;

  // Does not wait: *found says whether `key` exists, and *value is its value if so.
  virtual Status try_get(const std::string& key, std::string* value, bool* found) = 0;

  // Does not wait: *all_exist says whether every key in `keys` exists.
  virtual Status check(const std::vector<std::string>& keys, bool* all_exist) = 0;

  // Atomic counter: adds `delta` to the integer held by `key` (a missing key counts as 0)
  // and stores the result, as decimal text ("-12"), so get() reads it as torch's TCPStore
  // does. *new_value gets the result. A key holding anything but a decimal int64, or a
  // sum that overflows, is kInvalidArgument and changes nothing.
  virtual Status add(const std::string& key, std::int64_t delta, std::int64_t* new_value) = 0;

  // Atomic compare-and-set: if `key` holds `expected`, or `key` is missing and `expected`
  // is empty, sets it to `desired`. *actual gets the value `key` holds after the call:
  // `desired` when it was set, else the current value ("" when the key is missing). So
  // `*actual == desired` says the key now holds what the caller wanted. (torch returns
  // `expected` for a missing key; kolo returns what is there.)
  virtual Status compare_set(const std::string& key, const std::string& expected,
                             const std::string& desired, std::string* actual) = 0;

  // Waits until every key in `keys` exists. Past `deadline`: a kPeerFailure naming the
  // keys still missing.
  virtual Status wait(const std::vector<std::string>& keys, Deadline deadline) = 0;

  // Removes `key`; *existed says whether it was there.
  virtual Status erase(const std::string& key, bool* existed) = 0;

  // What the store is, for messages: "memory store", "file store /shared/job7", ...
  virtual std::string describe() const = 0;
};

// --- Helpers the implementations share (one wording for every store) ---

// kInvalidArgument for an empty key (no store accepts one); OK otherwise.
Status check_key(const std::string& store, const std::string& key);

// A key as messages show it: in single quotes, with bytes outside printable ASCII (and
// the quote and backslash) written as \xNN.
std::string quote_key(const std::string& key);

// The error of a wait that ran out: "rendezvous: key 'rank/3' was not set within 30 s in
// file store /x; ...". `missing` lists the keys still missing (in the caller's order),
// `waited_for` how many keys the call waited for, `waited` how long it waited.
Status missing_keys_error(const std::string& store, const std::vector<std::string>& missing,
                          std::size_t waited_for, Clock::duration waited);

// add()'s arithmetic: `current` is the key's value (nullptr when missing, which counts as
// 0); *out gets current + delta. kInvalidArgument, naming the key and the value, when the
// value is not a decimal int64 ("-12", "0"; no spaces, no '+') or the sum overflows.
Status add_to_counter(const std::string& store, const std::string& key, const std::string* current,
                      std::int64_t delta, std::int64_t* out);

}  // namespace kolo::rendezvous
