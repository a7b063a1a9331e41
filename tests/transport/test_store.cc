// open_test_store (test_store.h).
#include "test_store.h"

#include <cstdlib>
#include <string>

#include "rendezvous/tcp_store.h"

namespace kolo::transport::testing {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

Status open_test_store(TestStore* out) {
  const char* addr = std::getenv("KOLO_RENDEZVOUS_ADDR");
  const std::string where = addr != nullptr ? addr : "";
  const std::size_t colon = where.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("KOLO_RENDEZVOUS_ADDR='" + where +
                           "': expected host:port (run this through run_ranks.sh)");
  }
  const std::string host = where.substr(0, colon);
  const int port = std::atoi(where.c_str() + colon + 1);
  if (env_int("KOLO_RANK", 0) == 0) {
    rendezvous::TcpStoreServerOptions server;
    server.host = host;
    server.port = port;
    KOLO_RETURN_IF_ERROR(rendezvous::TcpStoreServer::start(server, &out->server));
  }
  rendezvous::TcpStoreOptions client;
  client.host = host;
  client.port = port;
  client.connect_timeout_s = 30;
  std::unique_ptr<rendezvous::TcpStore> store;
  KOLO_RETURN_IF_ERROR(rendezvous::TcpStore::connect(client, &store));
  out->store = std::move(store);
  return Status::OK();
}

}  // namespace kolo::transport::testing
