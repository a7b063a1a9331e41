// Test helper for the TCP store's tests (tcp_store_test.cc, tcp_store_security_test.cc): a
// server with the job secret on a port of its choosing, clients of it, and raw sockets to it
// that send hand-made frames.
//
// Not for: the Store contract (store_test.cc) or the wire format (tcp_store_wire_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"
#include "rendezvous/tcp_store_wire.h"

namespace kolo::rendezvous::testing {

inline const std::string kSecret("job-secret\0\x01", 12);

inline double seconds_since(Deadline start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline std::unique_ptr<TcpStoreServer> serve(const std::string& secret = kSecret, int port = 0) {
  TcpStoreServerOptions o;
  o.port = port;
  o.secret = secret;
  std::unique_ptr<TcpStoreServer> server;
  const Status s = TcpStoreServer::start(o, &server);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return server;
}

inline Status connect(int port, std::unique_ptr<TcpStore>* out, const std::string& secret = kSecret,
                      double timeout_s = 2) {
  TcpStoreOptions o;
  o.port = port;
  o.secret = secret;
  o.connect_timeout_s = timeout_s;
  return TcpStore::connect(o, out);
}

inline std::unique_ptr<TcpStore> must_connect(int port) {
  std::unique_ptr<TcpStore> store;
  const Status s = connect(port, &store);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return store;
}

inline int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

inline std::string frame(const wire::Message& m) {
  std::string f;
  EXPECT_TRUE(wire::encode(m, &f).ok());
  return f;
}

inline std::string hello(const std::string& secret = kSecret) {
  wire::Message m;
  m.op = wire::Op::kHello;
  m.value = secret;
  return frame(m);
}

inline void send_bytes(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

inline void expect_serving(TcpStore& store, const std::string& key) {
  ASSERT_TRUE(store.set(key, "still here").ok());
  std::string value;
  const Status s = store.get(key, deadline_after(1), &value);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(value, "still here");
}

}  // namespace kolo::rendezvous::testing
