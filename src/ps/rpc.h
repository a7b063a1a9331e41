// Request/reply calls between the tasks of a parameter-server job (chief, workers, ps
// tasks, evaluator), over ZeroMQ (libzmq, through cppzmq; docs/dependencies.md says why).
//
//   RpcServer server({.endpoint = "tcp://*:2222", .secret = secret, .name = task});
//   server.handle("ping", [](const Message& req, Message* reply, Deadline) {
//     reply->fields.set("pong", req.fields.get_int("n"));
//     return Status::OK();
//   });
//   KOLO_RETURN_IF_ERROR(server.start());
//
//   RpcClient client({.endpoint = "tcp://h:2222", .secret = secret, .peer = "/job:ps/...",
//                     .self = "/job:worker/replica:0/task:0"});
//   Message req{"ping"}, reply;
//   req.fields.set("n", std::int64_t{7});
//   Status s = client.call(req, &reply, deadline_after(10));
//
// Every call has a deadline (the server is told the time left, so a handler that waits
// waits at most that long). A server accepts only processes that know the job's secret
// (ZeroMQ's PLAIN mechanism checked by a ZAP handler: user = the caller's task name,
// password = the secret); with no secret it accepts only loopback peers and logs a
// warning once, as the TCP store does (docs/rendezvous.md). Every message is checked: a
// malformed, oversized or unknown-method request is answered with an error (or dropped
// when it cannot be answered), logged with the peer, and the server keeps serving.
//
// Not for: what the ps tasks store and how they update it (ps_service.h), scheduling
// steps on workers (coordinator.h), collectives (the runtime).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"

namespace kolo::ps {

// Named scalar fields of a message. A getter of a missing field or of another type
// returns kInvalidArgument naming the field (handlers return it to the caller as is).
class Fields {
 public:
  Fields& set(const std::string& key, std::int64_t value);
  Fields& set(const std::string& key, double value);
  Fields& set(const std::string& key, std::string value);
  bool has(const std::string& key) const;
  Status get(const std::string& key, std::int64_t* out) const;
  Status get(const std::string& key, double* out) const;
  Status get(const std::string& key, std::string* out) const;
  // The field or `fallback` when missing (a field of another type is still an error).
  Status get_or(const std::string& key, std::int64_t fallback, std::int64_t* out) const;

  struct Value;  // int64, double or string

 private:
  std::map<std::string, std::shared_ptr<const Value>> values_;
  friend struct WireCodec;
};

// One request or reply: a method name (requests), small fields, and payload blobs
// (tensor bytes; sent as separate frames, never copied into the fields).
struct Message {
  std::string method;  // requests; empty in replies
  Fields fields{};
  std::vector<std::string> blobs{};
};

struct RpcServerOptions {
  // Where to listen: "tcp://*:PORT", "tcp://HOST:PORT" ("tcp://127.0.0.1:0" takes any
  // free port; endpoint() says which).
  std::string endpoint = "tcp://127.0.0.1:0";
  // The job secret (KOLO_RENDEZVOUS_SECRET). Empty: loopback peers only, warning logged.
  std::string secret{};
  // This task's name, e.g. "/job:ps/replica:0/task:1": in logs and in callers' errors.
  std::string name = "ps";
  // Requests larger than this are refused (the connection's peer is logged).
  std::size_t max_message_bytes = std::size_t{1} << 30;
  // Handlers run on a pool of threads that grows while all are busy (handlers may wait,
  // e.g. a synchronous pull waiting for the next version), up to this many.
  int max_handler_threads = 64;
};

// A handler answers one request. `deadline` is the caller's (as the server sees it).
// A non-OK Status is sent to the caller as the reply's status (its code and message).
using Handler = std::function<Status(const Message& request, Message* reply, Deadline deadline)>;

class RpcServer {
 public:
  explicit RpcServer(RpcServerOptions options);
  ~RpcServer();  // stop()
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Registers `method` (before start()).
  void handle(const std::string& method, Handler handler);
  // Binds and starts serving. kInvalidArgument when the endpoint cannot be bound, naming
  // it (e.g. the port is taken: "another process listens on ...").
  Status start();
  // The bound endpoint, "tcp://127.0.0.1:41234" (after start()).
  std::string endpoint() const;
  // options.name: services put it in their errors.
  const std::string& name() const;
  // Stops accepting, waits (bounded) for running handlers, closes the socket. Idempotent.
  void stop();

  // Bytes of requests received for `method` (fields and blobs), and all methods' total:
  // tests count what travels (the sparse pushes).
  std::uint64_t bytes_received(const std::string& method) const;
  std::uint64_t bytes_received() const;
  // Requests refused (bad secret, malformed, oversized, unknown method), for tests.
  std::uint64_t refused() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct RpcClientOptions {
  std::string endpoint;  // "tcp://host:port"
  std::string secret{};  // the job secret
  std::string peer;      // the server's task name, for errors ("/job:ps/replica:0/task:1")
  std::string self;      // this task's name (the PLAIN user; the server logs it)
};

// A connection to one server. call() is thread-safe: calls from several threads are
// in flight together (each reply finds its caller by a request id).
class RpcClient {
 public:
  explicit RpcClient(RpcClientOptions options);
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Sends `request` and waits for its reply until `deadline`. Errors:
  //   kPeerFailure  no reply in time ("the ps task /job:ps/replica:0/task:1 at
  //                 tcp://h:2222 did not answer 'push' within 10 s"), or the server
  //                 refused this process's secret (said so: ZeroMQ's handshake failure)
  //   the reply's own code and message when the handler failed
  // A late reply to a call that timed out is dropped.
  Status call(const Message& request, Message* reply, Deadline deadline);

  std::uint64_t bytes_sent() const;
  const RpcClientOptions& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::ps
