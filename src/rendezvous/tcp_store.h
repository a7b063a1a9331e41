// TcpStore: the client half of the TCP store, a Store over one connection to a
// TcpStoreServer (tcp_store_server.h) that kolorun, or rank 0, runs for the job.
//
// Thread-safe: each call takes an idle connection to the server, or opens one, for the
// time of one request and reply, so a thread blocked in get() does not hold up the
// thread whose set() it waits for. (Usually that is one connection per process: a second
// opens only while a call is in flight.) A blocking get or wait
// sends its remaining time with the request, so the server answers at the deadline
// itself; the client only adds TcpStoreOptions::io_timeout_s of slack for the answer.
// A lost connection is not retried: every later call fails at once naming the server
// (a server that went away took the job's keys with it).
// Not for: bulk data (values are read whole; limits in tcp_store_wire.h).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "rendezvous/store.h"
#include "rendezvous/tcp_store_wire.h"

namespace kolo::rendezvous {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // the server's address (name or numeric)
  int port = 0;                    // the server's port; required
  // The job secret (bytes), the same the server was given; kolorun passes it to its
  // workers in KOLO_RENDEZVOUS_SECRET. Empty: none (a server without one accepts this
  // host's processes only).
  std::string secret;
  // How long connect() keeps retrying while nobody listens yet (the server may start
  // after its clients). Default 60 s.
  double connect_timeout_s = 60;
  // How long any one reply may take beyond the caller's deadline (for get/wait) or at all
  // (the other operations) before the server counts as gone. Default 30 s.
  double io_timeout_s = 30;
};

class TcpStore : public Store {
 public:
  // Connects (retrying until connect_timeout_s) and authenticates. kPeerFailure naming
  // host:port when nobody answers in time; kInvalidArgument when the server refuses the
  // secret.
  static Status connect(const TcpStoreOptions& options, std::unique_ptr<TcpStore>* out);

  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  Status set(const std::string& key, const std::string& value) override;
  Status get(const std::string& key, Deadline deadline, std::string* value) override;
  Status try_get(const std::string& key, std::string* value, bool* found) override;
  Status check(const std::vector<std::string>& keys, bool* all_exist) override;
  Status add(const std::string& key, std::int64_t delta, std::int64_t* new_value) override;
  Status compare_set(const std::string& key, const std::string& expected,
                     const std::string& desired, std::string* actual) override;
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Status erase(const std::string& key, bool* existed) override;
  std::string describe() const override { return "TCP store " + where_; }

 private:
  struct Connection {
    int fd = -1;
    std::string in;  // bytes read past the last reply
    ~Connection();
  };

  explicit TcpStore(TcpStoreOptions options);

  // One connection attempt (connect and hello) until `by`, `timeout_s` from now (for
  // the message).
  // *accepted (when given): whether the server accepted the TCP connection (a failure
  // after that was the hello's).
  Status open_connection(Deadline by, double timeout_s, std::unique_ptr<Connection>* out,
                         bool* accepted = nullptr);
  // open_connection, tried again with backoff (10 ms doubling to 200 ms) until `by` while
  // it fails with kPeerFailure; with `unless_refused`, only while the server accepted
  // the connection (then a refused connect means the server is gone).
  Status open_retrying(Deadline by, double timeout_s, bool unless_refused,
                       std::unique_ptr<Connection>* out);
  // Sends q and reads its reply into *r, waiting for it until `reply_by`. A failed
  // reply (r->code) becomes the returned Status; an I/O error breaks the store.
  Status call(const wire::Message& q, Deadline reply_by, wire::Message* r);
  // The exchange itself (`frame` is the encoded request, `op` names it in errors), on a
  // connection the caller holds alone.
  Status exchange(Connection* c, wire::Op op, const std::string& frame, Deadline reply_by,
                  wire::Message* r) const;
  // A blocking get/wait: the request with the time left, and the error the store words.
  Status call_waiting(wire::Message q, Deadline deadline, wire::Message* r);
  Deadline io_deadline() const;

  const TcpStoreOptions options_;
  const std::string where_;  // "host:port"
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ KOLO_GUARDED_BY(mu_);
  Status broken_ KOLO_GUARDED_BY(mu_);  // why the store gave up, once it did
};

}  // namespace kolo::rendezvous
