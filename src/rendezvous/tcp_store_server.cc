// The TCP store server's serving thread (tcp_store_server.h): sockets, parked waits, and
// the key map. The frame format is tcp_store_wire.h's.
#include "rendezvous/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <map>
#include <optional>

#include "common/deadline.h"
#include "common/log_limiter.h"
#include "common/logging.h"
#include "common/secret.h"
#include "rendezvous/socket_peers.h"
#include "rendezvous/spare_descriptors.h"
#include "rendezvous/store.h"
#include "rendezvous/tcp_store_wire.h"

namespace kolo::rendezvous {

namespace {

using wire::Message;
using wire::Op;

using wire::kMaxHelloBytes;
constexpr std::size_t kReadChunk = 64 * 1024;

std::string errno_text(int e) { return std::string(std::strerror(e)); }

struct Parked {
  Message request;
  Deadline deadline;
};

struct Connection {
  int fd = -1;
  std::string peer;
  bool authed = false;
  Deadline accepted;  // when accept() returned it
  Deadline hello_by;  // closed unless authed by then
  bool dead = false;  // closed at the end of this poll round
  std::string in, out;
  std::deque<Message> pending;  // requests read but not yet served (behind a parked one)
  std::optional<Parked> parked;
};

}  // namespace

class TcpStoreServer::Loop {
 public:
  Loop(int listen_fd, int wake_fd, std::string name, std::string secret, double hello_timeout_s,
       std::map<std::string, std::string> initial, const std::atomic<bool>* stopping,
       std::atomic<int>* refused, std::atomic<int>* waiting)
      : hello_timeout_(seconds_duration(hello_timeout_s)),
        listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        name_(std::move(name)),
        secret_(std::move(secret)),
        stopping_(stopping),
        refused_(refused),
        waiting_(waiting),
        values_(std::move(initial)) {}

  ~Loop() {
    for (auto& c : conns_) ::close(c.fd);
    ::close(listen_fd_);
  }

  void run() {
    std::vector<pollfd> fds;
    while (!stopping_->load()) {
      int parked = 0;
      for (const auto& c : conns_) parked += c.parked ? 1 : 0;
      waiting_->store(parked);
      fds.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      // While accept() is out of descriptors the listener is left alone (it stays readable:
      // polling it would spin).
      const bool paused = accept_paused_until_ && Clock::now() < *accept_paused_until_;
      if (!paused) accept_paused_until_.reset();
      fds.push_back({listen_fd_, static_cast<short>(paused ? 0 : POLLIN), 0});
      for (const auto& c : conns_) {
        fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      }
      const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
      if (n < 0 && errno != EINTR) {
        KOLO_LOG(kError, "store") << name_ << ": poll failed: " << errno_text(errno);
        return;
      }
      if (stopping_->load()) return;
      if (n > 0) {
        if (fds[1].revents & POLLIN) accept_all();
        std::size_t i = 2;
        for (auto& c : conns_) {
          if (i >= fds.size()) break;  // accepted this round; polled next round
          const short ev = fds[i++].revents;
          if (c.dead) continue;  // evicted by accept_all() this round
          if (ev & (POLLIN | POLLHUP | POLLERR)) read_from(c);
          if (!c.dead && (ev & POLLOUT)) write_to(c);
        }
      }
      expire_parked();
      expire_strangers();
      close_dead();
    }
  }

 private:
  int poll_timeout_ms() const {
    std::optional<Deadline> first = accept_paused_until_;
    for (const auto& c : conns_) {
      if (c.parked && (!first || c.parked->deadline < *first)) first = c.parked->deadline;
      if (!c.authed && (!first || c.hello_by < *first)) first = c.hello_by;
    }
    if (!first) return -1;
    const auto left = *first - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return ms > 60000 ? 60000 : static_cast<int>(ms);
  }

  void accept_all() {
    bool evicted_for_fd = false;
    while (true) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) return;
        const bool out_of_fds = e == EMFILE || e == ENFILE;
        std::optional<SpareDescriptors::Lent> lent;
        if (out_of_fds) lent.emplace(spares_);
        if (out_of_fds && !evicted_for_fd &&
            evict_oldest_stranger("this process is out of file descriptors")) {
          evicted_for_fd = true;  // its descriptor is free once closed: try once more
          close_dead();
          continue;
        }
        // Out of descriptors or memory: the pending connection stays in the backlog, and
        // accept() is tried again 100 ms on instead of at once.
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
        if (accept_log_.allow(name_, "failed accepts")) {
          KOLO_LOG(kWarning, "store")
              << name_ << ": accept failed: " << errno_text(e) << " (" << conns_.size()
              << " connections open); trying again every 100 ms";
        }
        return;
      }
      const std::string peer = peer_text(addr);
      if (const std::string why = why_refused(fd, addr); !why.empty()) {
        refused_->fetch_add(1);
        if (refusal_log_.allow(name_, "refused connections")) {
          KOLO_LOG(kWarning, "store") << name_ << ": refused " << peer << ": " << why;
        }
        ::close(fd);
        continue;
      }
      int strangers = 0;
      for (const auto& other : conns_) strangers += other.authed || other.dead ? 0 : 1;
      if (strangers >= kMaxStrangers) {
        // The newcomer may be a task of this job; the oldest connection without a hello
        // has had its chance (a kolo client says hello as soon as it connects).
        evict_oldest_stranger(std::to_string(strangers) +
                              " connections were waiting for their hello (the most allowed)");
      }
      Connection c;
      c.fd = fd;
      c.peer = peer;
      c.accepted = Clock::now();
      c.hello_by = c.accepted + hello_timeout_;
      conns_.push_back(std::move(c));
    }
  }

  // Why a server without a job secret does not let the process at `addr` in (empty: it
  // may come in). Such a server accepts only this host's processes of this user: this
  // host's other users are strangers too (the owner of the peer's socket, as the kernel's
  // table says). With a secret, everyone may try their hello.
  std::string why_refused(int fd, const sockaddr_storage& addr) {
    if (!secret_.empty()) return "";
    if (!is_loopback(addr)) {
      return "this server has no job secret, so it accepts only processes on this host (set "
             "KOLO_RENDEZVOUS_SECRET for a multi-host job)";
    }
    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    uid_t owner = 0;
    std::string error = "getsockname failed";
    Owner found = Owner::kUnreadable;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0) {
      const SpareDescriptors::Lent lent(spares_);  // this fd may have been the last one
      found = loopback_peer_uid(addr, local, &owner, &error);
    }
    if (found == Owner::kNotFound) error = "its socket is in neither /proc/net/tcp nor tcp6";
    if (found != Owner::kFound) {
      // Not knowing whose process it is, the server does not let it in (a kolo client
      // whose connection is closed before its hello connects again).
      return "cannot tell which user's process it is (" + error +
             "); a server without a job secret accepts only its own user's processes (set "
             "KOLO_RENDEZVOUS_SECRET to admit others)";
    }
    if (owner != ::geteuid()) {
      return "its process runs as uid " + std::to_string(owner) + ", not this job's uid " +
             std::to_string(::geteuid()) +
             " (a server without a job secret accepts only its own user's processes; set "
             "KOLO_RENDEZVOUS_SECRET to admit others)";
    }
    return "";
  }

  // Closes and forgets the connections marked dead.
  void close_dead() {
    conns_.remove_if([](const Connection& c) {
      if (c.dead) ::close(c.fd);
      return c.dead;
    });
  }

  // Closes the connection without a hello that was accepted first; false when none.
  bool evict_oldest_stranger(const std::string& why) {
    Connection* oldest = nullptr;
    for (auto& c : conns_) {
      if (c.authed || c.dead) continue;
      if (oldest == nullptr || c.accepted < oldest->accepted) oldest = &c;
    }
    if (oldest == nullptr) return false;
    const double silent = std::chrono::duration<double>(Clock::now() - oldest->accepted).count();
    char text[32];
    std::snprintf(text, sizeof(text), "%.3f", silent);
    refuse(*oldest, std::string("made room for a new connection: ") + why +
                        ", and this one had sent no accepted hello in " + text + " s");
    return true;
  }

  void refuse(Connection& c, const std::string& why) {
    refused_->fetch_add(1);
    if (refusal_log_.allow(name_, "refused connections")) {
      KOLO_LOG(kWarning, "store") << name_ << ": closed the connection from " << c.peer << ": "
                                  << why;
    }
    c.dead = true;
  }

  void read_from(Connection& c) {
    char buf[kReadChunk];
    while (true) {
      const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<std::size_t>(n));
        if (!c.authed && c.in.size() > kMaxHelloBytes + wire::kLengthBytes) break;
        if (static_cast<std::size_t>(n) < sizeof(buf)) break;
        continue;
      }
      if (n < 0 && (errno == EINTR)) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      c.dead = true;  // the peer closed (EOF) or the socket failed: nothing to log
      return;
    }
    if (!c.authed && c.in.size() >= wire::kLengthBytes) {
      const auto* p = reinterpret_cast<const unsigned char*>(c.in.data());
      const std::size_t first = p[0] | (p[1] << 8) | (p[2] << 16) | (std::size_t{p[3]} << 24);
      if (first > kMaxHelloBytes) {
        refuse(c, "a first frame of " + std::to_string(first) +
                      " bytes, over the hello limit (not a kolo client?)");
        return;
      }
    }
    std::vector<Message> got;
    const Status s = wire::extract(&c.in, &got);
    for (auto& m : got) c.pending.push_back(std::move(m));
    if (drain(c)) retry_parked();  // what came before a bad frame is still served
    if (!s.ok() && !c.dead) refuse(c, s.message());
  }

  void write_to(Connection& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.dead = true;
      return;
    }
  }

  void send_reply(Connection& c, const Message& m) {
    std::string frame;
    Status s = wire::encode(m, &frame);
    if (!s.ok()) {  // a reply over the frame limit: say so instead
      Message e;
      e.code = static_cast<std::uint8_t>(ErrorCode::kInvalidArgument);
      e.detail = "rendezvous: " + name_ + ": " + s.message();
      s = wire::encode(e, &frame);
    }
    c.out += frame;
    write_to(c);
  }

  // Serves c's pending requests in order until one must wait. True when one wrote to the
  // map: then the caller runs retry_parked() (drain never calls it, so a chain of requests
  // waking each other is a loop there, not a recursion as deep as the chain).
  bool drain(Connection& c) {
    bool changed = false;
    while (!c.dead && !c.parked && !c.pending.empty()) {
      Message q = std::move(c.pending.front());
      c.pending.pop_front();
      if (!c.authed) {
        hello(c, q);
        continue;
      }
      if (q.op == Op::kHello || q.op == Op::kReply) {
        refuse(c, "a " + wire::op_name(q.op) + " frame where a request belongs");
        return changed;
      }
      const bool one_key = q.op != Op::kCheck && q.op != Op::kWait;
      if (one_key && q.keys.size() != 1) {
        refuse(c, "a " + wire::op_name(q.op) + " with " + std::to_string(q.keys.size()) +
                      " keys (it takes one)");
        return changed;
      }
      Message r;
      if (serve(q, /*may_wait=*/q.number > 0, &r, &changed)) {
        send_reply(c, r);
      } else {
        const Deadline deadline = deadline_after_ns(q.number);
        c.parked = Parked{std::move(q), deadline};
      }
    }
    return changed;
  }

  void hello(Connection& c, const Message& q) {
    if (q.op != Op::kHello) {
      refuse(c, "a " + wire::op_name(q.op) + " before the hello (not a kolo client?)");
      return;
    }
    if (!secret_.empty() && !same_secret(q.value, secret_)) {
      Message r;
      r.code = static_cast<std::uint8_t>(ErrorCode::kInvalidArgument);
      r.detail = q.value.empty() ? "no job secret" : "wrong job secret";
      // Counted and logged before the client can hear of it; then one small frame,
      // which the socket buffer takes, before the close.
      refuse(c, r.detail + " (another job's process, or a stranger)");
      send_reply(c, r);
      return;
    }
    c.authed = true;
    send_reply(c, Message{});
  }

  // Answers q into *r and returns true, or returns false when q is a get or wait whose
  // keys are missing and `may_wait`. *changed: q wrote to the map.
  bool serve(const Message& q, bool may_wait, Message* r, bool* changed) {
    for (const auto& key : q.keys) {
      const Status s = check_key(name_, key);
      if (!s.ok()) return fail(s, r);
    }
    const std::string& key = q.keys.empty() ? empty_ : q.keys[0];
    switch (q.op) {
      case Op::kSet:
        values_[key] = q.value;
        *changed = true;
        return true;
      case Op::kTryGet:
      case Op::kGet: {
        const auto it = values_.find(key);
        if (it != values_.end()) {
          r->flag = 1;
          r->value = it->second;
          return true;
        }
        if (q.op == Op::kTryGet) return true;
        return missing_keys(may_wait, {key}, r);
      }
      case Op::kCheck:
      case Op::kWait: {
        std::vector<std::string> missing;
        for (const auto& k : q.keys) {
          if (values_.find(k) == values_.end()) missing.push_back(k);
        }
        r->flag = missing.empty() ? 1 : 0;
        if (missing.empty() || q.op == Op::kCheck) return true;
        return missing_keys(may_wait, std::move(missing), r);
      }
      case Op::kAdd: {
        const auto it = values_.find(key);
        std::int64_t v = 0;
        const Status s =
            add_to_counter(name_, key, it == values_.end() ? nullptr : &it->second, q.number, &v);
        if (!s.ok()) return fail(s, r);
        values_[key] = std::to_string(v);
        r->number = v;
        *changed = true;
        return true;
      }
      case Op::kCompareSet: {
        const auto it = values_.find(key);
        const bool swap = it == values_.end() ? q.value.empty() : it->second == q.value;
        if (swap) {
          values_[key] = q.detail;
          *changed = true;
        }
        r->value = swap ? q.detail : it == values_.end() ? std::string() : it->second;
        return true;
      }
      case Op::kErase:
        r->flag = values_.erase(key) > 0 ? 1 : 0;
        return true;
      case Op::kHello:
      case Op::kReply:
        break;
    }
    return true;  // not reached: drain() refuses these
  }

  static bool fail(const Status& s, Message* r) {
    r->code = static_cast<std::uint8_t>(s.code());
    r->detail = s.message();
    return true;
  }

  // A get or wait with keys missing: false (park it) when it may wait, else kPeerFailure
  // with the missing keys; the client words the error (it knows its deadline).
  static bool missing_keys(bool may_wait, std::vector<std::string> missing, Message* r) {
    if (may_wait) return false;
    r->code = static_cast<std::uint8_t>(ErrorCode::kPeerFailure);
    r->keys = std::move(missing);
    return true;
  }

  // After a write: answers every parked request whose keys now exist and serves what
  // that connection sent behind it; again while that wrote, since the write may wake
  // another. Each pass answers at least one request, so it ends.
  void retry_parked() {
    for (bool changed = true; changed;) {
      changed = false;
      for (auto& c : conns_) {
        if (c.dead || !c.parked) continue;
        Message r;
        bool wrote = false;  // a parked get or wait never writes
        if (!serve(c.parked->request, /*may_wait=*/true, &r, &wrote)) continue;
        c.parked.reset();
        send_reply(c, r);
        changed = drain(c) || changed;
      }
    }
  }

  // Closes every connection that has not said hello in time.
  void expire_strangers() {
    const Deadline now = Clock::now();
    for (auto& c : conns_) {
      if (!c.dead && !c.authed && c.hello_by <= now) {
        refuse(c, "no hello within " +
                      std::to_string(std::chrono::duration<double>(hello_timeout_).count()) +
                      " s of connecting (not a kolo client?)");
      }
    }
  }

  // Answers every parked request whose client's deadline passed.
  void expire_parked() {
    const Deadline now = Clock::now();
    bool changed = false;
    for (auto& c : conns_) {
      if (c.dead || !c.parked || c.parked->deadline > now) continue;
      Message r;
      bool wrote = false;
      serve(c.parked->request, /*may_wait=*/false, &r, &wrote);
      c.parked.reset();
      send_reply(c, r);
      changed = drain(c) || changed;
    }
    if (changed) retry_parked();
  }

  const Clock::duration hello_timeout_;
  const int listen_fd_;
  const int wake_fd_;
  const std::string name_;
  const std::string secret_;
  const std::string empty_;
  const std::atomic<bool>* stopping_;
  std::atomic<int>* refused_;
  std::atomic<int>* waiting_;
  std::list<Connection> conns_;
  std::map<std::string, std::string> values_;
  std::optional<Deadline> accept_paused_until_;  // accept() failed for want of descriptors
  LogLimiter accept_log_{"store"}, refusal_log_{"store"};
  SpareDescriptors spares_;
};

Status TcpStoreServer::start(const TcpStoreServerOptions& options,
                             std::unique_ptr<TcpStoreServer>* out) {
  const std::string where = options.host + ":" + std::to_string(options.port);
  if (options.secret.size() > wire::kMaxSecretBytes) {
    return InvalidArgument("rendezvous: the TCP store server at " + where + ": the job secret is " +
                           std::to_string(options.secret.size()) + " bytes, over the limit of " +
                           std::to_string(wire::kMaxSecretBytes) +
                           " (KOLO_RENDEZVOUS_SECRET); no client could present it");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int gai =
      ::getaddrinfo(options.host.c_str(), std::to_string(options.port).c_str(), &hints, &res);
  if (gai != 0) {
    return InvalidArgument("rendezvous: the TCP store server cannot listen on " + where + ": " +
                           ::gai_strerror(gai) + "; give a local address or host name");
  }
  int fd = -1;
  std::string last_error = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) break;
    last_error = errno_text(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    return InvalidArgument("rendezvous: the TCP store server cannot listen on " + where + ": " +
                           last_error +
                           "; is another job using the port? (port 0 picks a free one)");
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    ::close(fd);
    return Internal("rendezvous: TCP store server: eventfd failed: " + errno_text(errno));
  }
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->port_ = port;
  server->wake_fd_ = wake;
  const std::string name = "TCP store server " + options.host + ":" + std::to_string(port);
  if (options.secret.empty()) {
    KOLO_LOG(kWarning, "store") << name
                                << " has no job secret: it accepts only this user's processes "
                                   "on this host, and any of them could join; set "
                                   "KOLO_RENDEZVOUS_SECRET (kolorun sets one)";
  }
  server->loop_ = std::make_unique<Loop>(fd, wake, name, options.secret, options.hello_timeout_s,
                                         options.initial, &server->stopping_, &server->refused_,
                                         &server->waiting_);
  server->thread_ = std::thread([loop = server->loop_.get()] { loop->run(); });
  *out = std::move(server);
  return Status::OK();
}

void TcpStoreServer::stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  loop_.reset();  // closes every connection: waiting clients see EOF at once
  ::close(wake_fd_);
  wake_fd_ = -1;
}

TcpStoreServer::~TcpStoreServer() { stop(); }

}  // namespace kolo::rendezvous
