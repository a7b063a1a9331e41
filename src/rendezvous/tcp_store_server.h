// TcpStoreServer: the server half of the TCP store (tcp_store.h is the client). It runs
// inside kolorun, or inside rank 0 of a job started without kolorun, and holds the job's
// keys in memory for as long as it runs.
//
// One background thread owns everything: the listening socket, every connection and the
// key map, and serves them with poll() (no thread per client). A get or wait whose keys
// are missing is parked and answered when a write sets them or when the client's deadline
// (sent as a remaining duration) passes, so a waiting client costs nothing but its socket.
//
// Authentication: the first frame of a connection is a hello carrying the job secret,
// compared in constant time with TcpStoreServerOptions::secret. A wrong secret, a frame
// before the hello, a malformed or oversized frame: that connection is closed with a
// warning naming the peer, and the server goes on serving the others. Without a secret
// only loopback peers are accepted (docs/rendezvous.md says what that protects).
// Not for: persistence (the keys die with the server) or bulk data (wire limits in
// tcp_store_wire.h).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace kolo::rendezvous {

struct TcpStoreServerOptions {
  // The address to listen on (a name or a numeric IPv4/IPv6 address). Default loopback:
  // only this host. A multi-host job listens on "0.0.0.0" (and must set a secret).
  std::string host = "127.0.0.1";
  // The port; 0 (default) lets the system pick one, which port() then says.
  int port = 0;
  // The job secret every client must present (bytes; kolorun makes a random one). Empty
  // (default): no secret, and only loopback peers are accepted, with a warning at start.
  std::string secret;
  // A connection that has not sent an accepted hello this long after it was accepted is
  // closed (and counted in refused()), so a silent stranger cannot hold a socket; and at
  // most kMaxStrangers connections may wait for their hello at once (past that, a new one
  // closes the oldest of them). Default 10 s.
  double hello_timeout_s = 10;
  // Keys the store holds from the start, before any client can connect (start-up's record
  // of which job the store serves: job_store.cc).
  std::map<std::string, std::string> initial;
};

class TcpStoreServer {
 public:
  // Connections that may be waiting for their hello at once (see hello_timeout_s).
  static constexpr int kMaxStrangers = 256;
  // Binds, listens, and starts the serving thread. kInvalidArgument naming host:port when
  // the address cannot be resolved or bound (in use?).
  static Status start(const TcpStoreServerOptions& options, std::unique_ptr<TcpStoreServer>* out);

  ~TcpStoreServer();  // stop()
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port it listens on (the one picked, for port 0).
  int port() const { return port_; }

  // Closes every connection (their clients fail at once, naming the server) and joins the
  // thread. Bounded: the thread wakes from poll() at once and never blocks on a socket.
  // Idempotent.
  void stop();

  // Connections closed for a wrong secret or a bad frame so far (for tests and logs).
  int refused() const { return refused_.load(); }
  // Gets and waits parked now, waiting for keys (for tests: "the client is waiting").
  int waiting() const { return waiting_.load(); }

 private:
  class Loop;  // tcp_store_server.cc: the state the serving thread owns
  TcpStoreServer() = default;

  int port_ = 0;
  std::unique_ptr<Loop> loop_;  // touched only by the serving thread while it runs
  std::thread thread_;
  int wake_fd_ = -1;  // an eventfd: stop() writes it so poll() returns
  std::atomic<bool> stopping_{false};
  std::atomic<int> refused_{0};
  std::atomic<int> waiting_{0};
};

}  // namespace kolo::rendezvous
