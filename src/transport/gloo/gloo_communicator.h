// The Gloo transport: kolo's Communicator over Debian's libgloo (TCP pairs), for jobs
// whose processes meet through a rendezvous store (kolorun, TF_CONFIG, torch-style
// environments) rather than through mpirun.
//
// Every call is bounded by its deadline (gloo's per-operation timeout is set to the time
// left, at least 1 ms). Any failure breaks the communicator, and the kPeerFailure names
// the rank that caused it (a peer's process that is gone, the launcher's exit notice, or
// what the failing peer wrote to the store), not a socket address. A rank that fails
// shuts its gloo sockets down at once, so that every peer blocked in gloo fails within
// milliseconds instead of at its own deadline. docs/gloo.md has the design.
//
// Not for: CUDA memory (nccl/), or use from several threads at once (one thread makes
// every call, as the runtime's background thread does). This header does not include
// gloo's headers, so the transport table compiles without them.
#pragma once

#include <memory>
#include <string>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/communicator.h"

namespace kolo::rendezvous {
class Store;
}

namespace kolo::transport {

struct GlooOptions {
  int rank = 0;  // this process's rank in the job (required: 0 <= rank < size)
  int size = 1;  // the number of processes (required)
  // The address gloo binds its sockets to (KOLO_HOST_ADDR; a name or a numeric address).
  // Empty (default): this host's name, as gethostname() says.
  std::string host_addr;
  // KOLO_GLOO_IFACE: bind to this network interface's address instead (default empty:
  // by host_addr).
  std::string iface;
  // KOLO_TEST_HOSTS (test-only; default 0 = off): fake this many hosts, cut into
  // contiguous blocks of ranks, as MpiOptions::test_hosts does.
  int test_hosts = 0;
  // KOLO_GLOO_ALLREDUCE=gloo: allreduce through gloo::allreduce (gloo's own ring) instead
  // of kolo's, for comparisons (bench/compare.sh). Every rank must say the same. Default
  // false.
  bool library_allreduce = false;
  // KOLO_PEER_TIMEOUT_SECONDS: gloo's timeout for calls whose deadline is unbounded
  // (Deadline::max()). Default 60 s.
  double timeout_seconds = 60;
  // Where in the store this communicator's keys live (default "gloo/world"); sub-
  // communicators (split_by_host, subset) live under it.
  std::string key_prefix = "gloo/world";
  // The bound on rendezvous and connecting to every peer (default: none).
  Deadline deadline = Deadline::max();
  // Whether the launcher (kolorun) publishes worker exits in the store (launcher/exits, a
  // counter, and launcher/exit/<rank>, a sentence); then failures quote them, waiting up
  // to 2 s for the notice. Default false.
  bool launcher_notices = false;
  // Where those notices are ("<prefix>/exits", "<prefix>/exit/<rank>"): "launcher", or an
  // elastic generation's "elastic/<g>/launcher" (rendezvous/elastic_keys.h).
  std::string launcher_prefix = "launcher";
};

// Creates the communicator of all `options.size` ranks: every rank calls it with the same
// store (shared by the job's processes; kept for failure diagnosis and sub-communicators).
// Blocks until every rank has connected, or fails at options.deadline naming the ranks
// that did not arrive (the store's message). kInvalidArgument for bad options.
Status create_gloo_communicator(const GlooOptions& options,
                                std::shared_ptr<rendezvous::Store> store,
                                std::unique_ptr<Communicator>* out);

}  // namespace kolo::transport
