// The job's rendezvous store for the transport check programs started without kolorun
// (run_ranks.sh): KOLO_RENDEZVOUS_ADDR=host:port names it; rank 0 (KOLO_RANK) starts a
// TcpStoreServer on that port (loopback, no secret), and every rank connects a TcpStore
// client. One small function, so that it can give way to core's job-store code later.
// Test code only.
#pragma once

#include <memory>

#include "common/status.h"
#include "rendezvous/store.h"
#include "rendezvous/tcp_store_server.h"

namespace kolo::transport::testing {

struct TestStore {
  std::unique_ptr<rendezvous::TcpStoreServer> server;  // rank 0 only; keep it running
  std::shared_ptr<rendezvous::Store> store;
};

Status open_test_store(TestStore* out);

// An integer from the environment, or `fallback` when unset.
int env_int(const char* name, int fallback);

}  // namespace kolo::transport::testing
