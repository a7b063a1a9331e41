// The Gloo transport's lifecycle: the world's rendezvous (device, connectFullMesh through
// the store, what each rank publishes about itself), the topology, sub-communicators
// (split_by_host, subset), and what a failure means (fail()).
//
// Every rank publishes "info/<rank>" under the communicator's prefix after connecting:
// its host name, pid, gloo's listening address and the sockets gloo opened, so that every
// rank can map gloo's "ip:port" texts to ranks and tell whether a same-host peer's
// process is gone. A rank whose call fails writes "fail/<rank>" (why) and counts itself in
// "failed" before shutting its sockets down, so the peers that see its sockets close quote
// the first cause, and peers whose wait its closing sockets do not end (a message partly
// transferred) hear of it from their watchdog (failed_members).
//
// Not for: the collectives (gloo_ops.cc), the control plane (gloo_control.cc), the
// watchdog and the notices (gloo_watch.cc).
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <utility>

#include "common/logging.h"
#include "rendezvous/prefix_store.h"
#include "transport/gloo/gloo_internal.h"
#include "transport/gloo/gloo_store.h"

namespace kolo::transport {

Status create_gloo_communicator(const GlooOptions& options,
                                std::shared_ptr<rendezvous::Store> store,
                                std::unique_ptr<Communicator>* out) {
  return gloo_impl::GlooCommunicator::create_world(options, std::move(store), out);
}

namespace gloo_impl {
namespace {

bool listening(const std::vector<std::string>& list, const std::string& a) {
  return std::find(list.begin(), list.end(), a) != list.end();
}

std::string this_host() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

std::string seconds_text(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

// Topology of member `me` when member i runs on hosts[i]: MPI's split-type-shared order
// (local ranks by rank inside a host; cross groups by local rank, ordered by rank).
Topology topology_of(const std::vector<std::string>& hosts, int me) {
  const int n = static_cast<int>(hosts.size());
  std::vector<int> local(n, 0);
  Topology t;
  t.rank = me;
  t.size = n;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < i; ++j) local[i] += hosts[j] == hosts[i];
  }
  t.local_rank = local[me];
  t.local_size = static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[me]));
  t.cross_rank = 0;
  t.cross_size = 0;
  for (int i = 0; i < n; ++i) {
    if (local[i] != local[me]) continue;
    if (i < me) ++t.cross_rank;
    ++t.cross_size;
  }
  return t;
}

}  // namespace

Status GlooCommunicator::create_world(const GlooOptions& options,
                                      std::shared_ptr<rendezvous::Store> store,
                                      std::unique_ptr<Communicator>* out) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return InvalidArgument("gloo: rank " + std::to_string(options.rank) + " of " +
                           std::to_string(options.size) +
                           " is not a rank (KOLO_RANK must be in 0..KOLO_SIZE-1)");
  }
  if (options.test_hosts < 0 || options.test_hosts > options.size) {
    return InvalidArgument("gloo: KOLO_TEST_HOSTS=" + std::to_string(options.test_hosts) +
                           " but there are only " + std::to_string(options.size) +
                           " ranks (test-only: at most one host per rank)");
  }
  if (store == nullptr) {
    return InvalidArgument(
        "gloo: no rendezvous store (start the job with kolorun, or give "
        "it a store: KOLO_RENDEZVOUS_ADDR)");
  }
  // gloo writes to its sockets with writev(), which raises SIGPIPE when a peer is gone:
  // that would kill this process before it could report the peer. Ignore it (unless the
  // program installed a handler of its own); the write then fails with EPIPE.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  auto world = std::make_shared<World>();
  world->options = options;
  world->store = store;
  world->my_host = this_host();
  ::gloo::transport::tcp::attr attr;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
  } else {
    attr.hostname = options.host_addr.empty() ? world->my_host : options.host_addr;
  }
  try {
    world->device = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return InvalidArgument("gloo: cannot bind to " +
                           (options.iface.empty() ? "address '" + attr.hostname + "'"
                                                  : "interface '" + options.iface + "'") +
                           " (KOLO_HOST_ADDR / KOLO_GLOO_IFACE): " + e.what());
  }
  // An elastic generation's notices are of its own members only (elastic_keys.h), so
  // each of them counts, even one posted before this rank got here.
  if (options.launcher_notices && options.launcher_prefix == "launcher") {
    std::string v;
    bool found = false;
    if (store->try_get(options.launcher_prefix + "/exits", &v, &found).ok() && found) {
      world->exits_at_start = std::atoll(v.c_str());
    }
  }
  std::vector<int> members(static_cast<std::size_t>(options.size));
  for (int r = 0; r < options.size; ++r) members[r] = r;
  std::unique_ptr<GlooCommunicator> comm(new GlooCommunicator());
  KOLO_RETURN_IF_ERROR(
      comm->connect(world, std::move(members), options.key_prefix, "gloo", options.deadline));
  world->watchdog = std::make_unique<Watchdog>();
  *out = std::move(comm);
  return Status::OK();
}

Status GlooCommunicator::connect(std::shared_ptr<World> world, std::vector<int> members,
                                 const std::string& prefix, const char* label, Deadline deadline) {
  world_ = std::move(world);
  members_ = std::move(members);
  prefix_ = prefix;
  label_ = label;
  store_ = std::make_shared<rendezvous::PrefixStore>(world_->store, prefix);
  const int me = static_cast<int>(
      std::find(members_.begin(), members_.end(), world_->options.rank) - members_.begin());
  const int n = static_cast<int>(members_.size());
  topology_.rank = me;
  topology_.size = n;

  auto context = std::make_shared<::gloo::rendezvous::Context>(me, n);
  context->setTimeout(timeout(deadline));
  // While the members meet, an exit the launcher published ends the wait (a rank killed
  // during an elastic reset once left its peers here until the 630 s deadline).
  GlooStore::Watch watch;
  if (world_->options.launcher_notices) watch = [this] { return launcher_exits(); };
  GlooStore rendezvous_store(store_, deadline, std::move(watch));
  const std::map<unsigned long, int> before = socket_fds();
  try {
    context->connectFullMesh(rendezvous_store, world_->device);
  } catch (const std::exception& e) {
    broken_ = true;
    if (!rendezvous_store.error().ok()) {
      return Status(rendezvous_store.error().code(),
                    std::string(label) + ": rendezvous of " + std::to_string(n) +
                        " ranks failed: " + rendezvous_store.error().message());
    }
    return PeerFailure(std::string(label) + ": rank " + std::to_string(me) +
                       " could not connect to its " + std::to_string(n - 1) +
                       " peers: " + e.what());
  }
  context_ = context;

  std::vector<PairSocket> fresh;
  for (const auto& [inode, fd] : socket_fds()) {
    if (before.count(inode)) continue;
    PairSocket s;
    s.fd = fd;
    s.inode = inode;
    s.local = socket_address(fd, false);
    s.peer = socket_address(fd, true);
    if (!s.local.empty() && !s.peer.empty()) fresh.push_back(s);
  }
  KOLO_RETURN_IF_ERROR(map_sockets(fresh, rendezvous_store, deadline));
  std::lock_guard<std::mutex> lock(world_->comms_mu);
  world_->comms.push_back(this);
  return Status::OK();
}

Status GlooCommunicator::map_sockets(const std::vector<PairSocket>& fresh, GlooStore& watched,
                                     Deadline deadline) {
  const int me = topology_.rank, n = topology_.size;
  // gloo's listening addresses: on Debian's gloo every pair listens on a port of its own
  // ("ip:port" of pair i, i != me).
  std::vector<std::string> listens;
  for (int i = 0; i < n; ++i) {
    if (i == me) continue;
    const auto found = addresses_in(context_->getPair(i)->address().str());
    if (!found.empty()) listens.push_back(found.front());
  }
  std::ostringstream info;
  info << world_->my_host << "\n" << getpid() << "\n";
  for (const std::string& l : listens) info << "L " << l << "\n";
  for (const PairSocket& s : fresh) info << "S " << s.local << ">" << s.peer << "\n";
  KOLO_RETURN_IF_ERROR(store_->set("info/" + std::to_string(me), info.str()));

  struct Info {
    std::string host;
    int pid = 0;
    std::vector<std::string> listens;
    std::vector<std::pair<std::string, std::string>> sockets;
  };
  std::vector<Info> infos(static_cast<std::size_t>(n));
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("info/" + std::to_string(i));
  if (const Status s = watched.watched_wait(keys, deadline); !s.ok()) {
    broken_ = true;
    return Status(s.code(),
                  "gloo: rank " + std::to_string(me) + " of " + std::to_string(n) +
                      " connected but its peers' socket records never came: " + s.message());
  }
  for (int i = 0; i < n; ++i) {
    std::string value;
    KOLO_RETURN_IF_ERROR(store_->get("info/" + std::to_string(i), deadline, &value));
    std::istringstream in(value);
    std::string pid, line;
    std::getline(in, infos[i].host);
    std::getline(in, pid);
    infos[i].pid = std::atoi(pid.c_str());
    while (std::getline(in, line)) {
      if (line.rfind("L ", 0) == 0) infos[i].listens.push_back(line.substr(2));
      const std::size_t gt = line.find('>');
      if (line.rfind("S ", 0) == 0 && gt != std::string::npos)
        infos[i].sockets.emplace_back(line.substr(2, gt - 2), line.substr(gt + 1));
    }
  }
  // A socket is gloo's when one end is a pair's listening address (the store's
  // connections never touch those ports), and it belongs to the member that holds its
  // other end.
  for (PairSocket s : fresh) {
    for (int i = 0; i < n && s.member < 0; ++i) {
      if (i == me) continue;
      if (!listening(listens, s.local) && !listening(infos[i].listens, s.peer)) continue;
      for (const auto& [local, peer] : infos[i].sockets) {
        if (local == s.peer && peer == s.local) s.member = i;
      }
    }
    if (s.member >= 0) sockets_.push_back(s);
  }
  listens_.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) listens_[i] = i == me ? listens : infos[i].listens;
  if (world_->peers.empty()) {  // the world: remember every rank's process
    world_->peers.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) world_->peers[i] = {infos[i].host, infos[i].pid};
  }
  hosts_.resize(static_cast<std::size_t>(n));
  const int fake = world_->options.test_hosts;
  for (int i = 0; i < n; ++i) {
    hosts_[i] = fake > 0 ? "test-host-" + std::to_string(static_cast<long long>(members_[i]) *
                                                         fake / world_->options.size)
                         : infos[i].host;
  }
  topology_ = topology_of(hosts_, me);
  return Status::OK();
}

GlooCommunicator::~GlooCommunicator() {
  if (world_ != nullptr) {
    std::lock_guard<std::mutex> lock(world_->comms_mu);
    auto& comms = world_->comms;
    comms.erase(std::remove(comms.begin(), comms.end(), this), comms.end());
  }
}

Status GlooCommunicator::split_by_host(HostGroup group, std::unique_ptr<Communicator>* out,
                                       std::vector<int>* world_ranks) {
  KOLO_RETURN_IF_ERROR(check_usable("split"));
  const bool host = group == HostGroup::kHost;
  const int seq = ++splits_;
  const int me = topology_.rank;
  const Topology all = topology_;
  std::vector<int> picked, members;
  for (int i = 0; i < size(); ++i) {
    const Topology t = topology_of(hosts_, i);
    if (host ? hosts_[i] == hosts_[me] : t.local_rank == all.local_rank) {
      picked.push_back(i);
      members.push_back(members_[i]);
    }
  }
  const std::string prefix =
      prefix_ + "/split" + std::to_string(seq) +
      (host ? "/host" + std::to_string(picked.front()) : "/cross" + std::to_string(all.local_rank));
  std::unique_ptr<GlooCommunicator> sub(new GlooCommunicator());
  const Deadline deadline = deadline_after(world_->options.timeout_seconds);
  KOLO_RETURN_IF_ERROR(
      sub->connect(world_, members, prefix, host ? "gloo[host]" : "gloo[cross]", deadline));
  // The sub-communicator keeps its members' hosts, so its own topology is one group.
  sub->hosts_.clear();
  for (int i : picked) sub->hosts_.push_back(hosts_[i]);
  const int r = sub->topology_.rank, n = sub->topology_.size;
  sub->topology_ = Topology{};
  sub->topology_.rank = r;
  sub->topology_.size = n;
  if (host) {
    sub->topology_.local_rank = r;
    sub->topology_.local_size = n;
  } else {
    sub->topology_.cross_rank = r;
    sub->topology_.cross_size = n;
  }
  *world_ranks = picked;
  *out = std::move(sub);
  return Status::OK();
}

Status GlooCommunicator::subset(const std::vector<int>& ranks, std::unique_ptr<Communicator>* out) {
  KOLO_RETURN_IF_ERROR(check_usable("subset"));
  out->reset();
  const int seq = ++splits_;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size() || (i > 0 && ranks[i] <= ranks[i - 1])) {
      return InvalidArgument(where("subset") +
                             ": ranks must be distinct, ascending ranks of this communicator");
    }
  }
  if (!std::binary_search(ranks.begin(), ranks.end(), rank())) return Status::OK();
  std::vector<int> members;
  for (int i : ranks) members.push_back(members_[i]);
  std::unique_ptr<GlooCommunicator> sub(new GlooCommunicator());
  KOLO_RETURN_IF_ERROR(sub->connect(world_, members, prefix_ + "/subset" + std::to_string(seq),
                                    "gloo[subset]",
                                    deadline_after(world_->options.timeout_seconds)));
  // Ranks of one host stay together; the subset's own grouping is not computed (as MPI).
  sub->topology_ = Topology{};
  sub->topology_.rank =
      static_cast<int>(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
  sub->topology_.size = static_cast<int>(ranks.size());
  sub->topology_.local_rank = sub->topology_.rank;
  sub->topology_.local_size = sub->topology_.size;
  *out = std::move(sub);
  return Status::OK();
}

std::string GlooCommunicator::where(const char* op) const {
  return std::string(label_) + " " + op + " on rank " + std::to_string(rank()) + " of " +
         std::to_string(size());
}

std::string GlooCommunicator::member_name(int member) const {
  std::string s = "rank " + std::to_string(member);
  if (members_[member] != member) s += " (world rank " + std::to_string(members_[member]) + ")";
  return s;
}

Status GlooCommunicator::check_usable(const char* op) const {
  if (!broken_) return Status::OK();
  return PeerFailure(where(op) + ": the communicator is broken by an earlier failure (" +
                     broken_reason_ + ")");
}

std::chrono::milliseconds GlooCommunicator::timeout(Deadline deadline) const {
  using std::chrono::milliseconds;
  const auto now = Clock::now();
  if (deadline == Deadline::max()) {
    return std::chrono::duration_cast<milliseconds>(
        seconds_duration(world_ ? world_->options.timeout_seconds : 60.0));
  }
  if (deadline <= now) return milliseconds(1);
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - now));
}

std::uint64_t GlooCommunicator::next_slot(int n) {
  // kolo's point-to-point slots: prefix 0x6b ('k') in the top byte, clear of the prefixes
  // gloo's collectives build their slots from (Slot::build(prefix, tag)).
  const std::uint64_t slot = (std::uint64_t{0x6b} << 56) | (slot_ & ((std::uint64_t{1} << 48) - 1));
  slot_ += static_cast<std::uint64_t>(n);
  return slot;
}

Status GlooCommunicator::fail(const char* op, Clock::time_point start, Deadline deadline,
                              const std::string& gloo_error, const std::string& cause) {
  // A peer that announced a failure (failure notices) shut its sockets down on purpose and
  // may have exited since, its job done: its announcement explains, not its closed socket
  // or its gone process. Else peers known to be gone explain most failures best. A cause
  // that already says so (the watchdog's) stands alone.
  std::string why = cause;
  const std::string notice = announced_failure();
  const std::string gone = notice.empty() ? gone_peers(/*wait=*/false) : notice;
  if (!gone.empty() && why.find(gone) == std::string::npos)
    why = why.empty() ? gone : gone + "; " + why;
  if (why.empty()) {
    // The members whose sockets gloo names, and what they wrote when they failed first.
    std::vector<int> named;
    for (const std::string& a : addresses_in(gloo_error)) {
      for (const PairSocket& s : sockets_) {
        if ((s.peer == a || s.local == a || listening(listens_[s.member], a)) &&
            std::find(named.begin(), named.end(), s.member) == named.end())
          named.push_back(s.member);
      }
    }
    for (int m : named) {
      why = recorded_failure(m);
      if (!why.empty()) break;
    }
    if (why.empty()) {
      // A peer's process may still be exiting, or a peer announcing its failure: look
      // again for a moment.
      const auto until = Clock::now() + std::chrono::milliseconds(300);
      while (why.empty() && Clock::now() < until) {
        why = announced_failure();
        if (why.empty()) why = failed_members();
        if (why.empty()) why = gone_peers(false);
        if (why.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (why.empty()) why = gone_peers(/*wait=*/true);
    }
    if (why.empty() && !named.empty()) {
      why = member_name(named.front()) +
            " closed its connection (its process exited or was killed, or it failed)";
    }
  }
  if (why.empty()) {
    if (gloo_error.find("imed out") != std::string::npos) {
      why = "did not complete within " + seconds_text(deadline - start) +
            ": some rank is dead, hung or not calling it";
      const std::string gone = gone_peers(/*wait=*/true);
      if (!gone.empty()) why += "; " + gone;
    } else {
      why = "gloo failed";
    }
  }
  std::string message = where(op) + ": " + why;
  if (!gloo_error.empty()) message += " [gloo: " + gloo_error + "]";
  // Tell the peers first (they read it when our sockets close), then close them.
  (void)store_->set("fail/" + std::to_string(rank()), message);
  std::int64_t failed = 0;
  (void)store_->add("failed", 1, &failed);
  shutdown_sockets();
  if (!broken_) {
    broken_ = true;
    broken_reason_ = message;
  }
  return PeerFailure(std::move(message));
}

}  // namespace gloo_impl
}  // namespace kolo::transport
