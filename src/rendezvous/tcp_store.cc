// The TCP store client (tcp_store.h): connecting with retries, the hello, and one
// request/reply exchange per operation over a non-blocking socket with poll() deadlines.
#include "rendezvous/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/format.h"

namespace kolo::rendezvous {

namespace {

using wire::Message;
using wire::Op;

Deadline saturating_add(Deadline t, Clock::duration d) {
  return d >= Deadline::max() - t ? Deadline::max() : t + d;
}

// poll()'s timeout for a deadline, in at most hour-long steps (callers loop).
int poll_ms(Deadline by) {
  const auto left = by - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<std::int64_t>(ms, 3600 * 1000));
}

// Waits until fd is ready for `events` or `by` passes; false on timeout.
bool wait_ready(int fd, short events, Deadline by) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_ms(by));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // the next read or write reports it
    if (n == 0 && Clock::now() >= by) return false;
  }
}

// One connection attempt to every address of host:port; the connected fd or -1, and
// *error saying why not.
int try_connect(const std::string& host, int port, Deadline by, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    *error = std::string("cannot resolve the host: ") + ::gai_strerror(gai);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        err = ETIMEDOUT;
        if (wait_ready(fd, POLLOUT, by)) {
          socklen_t len = sizeof(err);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
    }
    if (err != 0) {
      *error = std::strerror(err);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    const int one = 1;  // requests are small and answered one at a time
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

std::string seconds(double s) { return number_string(s) + " s"; }

}  // namespace

Status TcpStore::connect(const TcpStoreOptions& options, std::unique_ptr<TcpStore>* out) {
  std::unique_ptr<TcpStore> store(new TcpStore(options));
  // The server reads at most wire::kMaxHelloBytes before a hello: a longer secret would be
  // cut off as a stranger's, which looks like a dead server (and was retried as one).
  if (options.secret.size() > wire::kMaxSecretBytes) {
    return InvalidArgument("rendezvous: the job secret for " + store->describe() + " is " +
                           std::to_string(options.secret.size()) + " bytes, over the limit of " +
                           std::to_string(wire::kMaxSecretBytes) +
                           " (KOLO_RENDEZVOUS_SECRET): give a shorter one");
  }
  std::unique_ptr<Connection> c;
  // "Nobody listens yet" is worth a retry too: the server may start after its clients.
  KOLO_RETURN_IF_ERROR(store->open_retrying(deadline_after(options.connect_timeout_s),
                                            options.connect_timeout_s,
                                            /*unless_refused=*/false, &c));
  std::lock_guard<std::mutex> lock(store->mu_);
  store->idle_.push_back(std::move(c));
  *out = std::move(store);
  return Status::OK();
}

Status TcpStore::open_retrying(Deadline by, double timeout_s, bool unless_refused,
                               std::unique_ptr<Connection>* out) {
  auto backoff = std::chrono::milliseconds(10);
  while (true) {
    bool accepted = false;
    const Status s = open_connection(by, timeout_s, out, &accepted);
    if (s.ok()) return s;
    // A refused secret (kInvalidArgument) is never worth a retry.
    if (s.code() != ErrorCode::kPeerFailure || (unless_refused && !accepted) ||
        Clock::now() >= by) {
      return s;
    }
    std::this_thread::sleep_until(std::min(by, Clock::now() + backoff));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

Status TcpStore::open_connection(Deadline by, double timeout_s, std::unique_ptr<Connection>* out,
                                 bool* accepted) {
  if (accepted != nullptr) *accepted = false;
  std::string error;
  const int fd = try_connect(options_.host, options_.port, by, &error);
  if (fd < 0) {
    return PeerFailure("rendezvous: could not connect to the TCP store server at " + where_ +
                       " within " + seconds(timeout_s) + " (" + error +
                       "); is the server (kolorun, or rank 0) running, and are its host and "
                       "port right?");
  }
  if (accepted != nullptr) *accepted = true;
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  Message hello, reply;
  hello.op = Op::kHello;
  hello.value = options_.secret;
  std::string frame;
  if (!wire::encode(hello, &frame).ok()) {
    return InvalidArgument("rendezvous: the hello for " + describe() + " does not encode");
  }
  KOLO_RETURN_IF_ERROR(exchange(c.get(), Op::kHello, frame, std::max(by, io_deadline()), &reply));
  if (reply.code != 0) {
    return InvalidArgument("rendezvous: the TCP store server at " + where_ +
                           " refused this process: " + reply.detail +
                           "; every process of the job must have the job's secret "
                           "(KOLO_RENDEZVOUS_SECRET, which kolorun sets for its workers)");
  }
  *out = std::move(c);
  return Status::OK();
}

TcpStore::TcpStore(TcpStoreOptions options)
    : options_(std::move(options)), where_(options_.host + ":" + std::to_string(options_.port)) {}

TcpStore::~TcpStore() = default;

TcpStore::Connection::~Connection() {
  if (fd >= 0) ::close(fd);
}

Deadline TcpStore::io_deadline() const { return deadline_after(options_.io_timeout_s); }

Status TcpStore::call(const Message& q, Deadline reply_by, Message* r) {
  std::string frame;
  const Status encoded = wire::encode(q, &frame);  // over a limit: the caller's error alone
  if (!encoded.ok()) return InvalidArgument("rendezvous: " + describe() + ": " + encoded.message());
  std::unique_ptr<Connection> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    if (!idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!c) {
    // A new connection the server accepted but closed before answering its hello (busy
    // with strangers) loses nothing: try again, bounded; and a failure here leaves the
    // client usable (no request was under way). Refused outright (nobody listens): the
    // server is gone; say so at once.
    KOLO_RETURN_IF_ERROR(
        open_retrying(io_deadline(), options_.io_timeout_s, /*unless_refused=*/true, &c));
  }
  const Status s = exchange(c.get(), q.op, frame, reply_by, r);
  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok()) {  // the server is gone or out of step mid-request: give up for good
    if (broken_.ok()) broken_ = s;
    return s;
  }
  idle_.push_back(std::move(c));
  if (r->code != 0) return Status(static_cast<ErrorCode>(r->code), r->detail);
  return Status::OK();
}

Status TcpStore::exchange(Connection* c, wire::Op what, const std::string& frame, Deadline reply_by,
                          Message* r) const {
  const std::string op = wire::op_name(what);
  auto lost = [&](const std::string& why) {
    return PeerFailure("rendezvous: lost the connection to the TCP store server at " + where_ +
                       " during a " + op + " (" + why +
                       "); did the server (kolorun, or rank 0) exit? The job cannot "
                       "rendezvous without it");
  };
  std::size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(c->fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_ready(c->fd, POLLOUT, reply_by)) return lost("it took no data for too long");
    } else {
      return lost(std::strerror(errno));
    }
  }
  std::vector<Message> got;
  char buf[64 * 1024];
  while (true) {
    const Status s = wire::extract(&c->in, &got);
    if (!s.ok()) return lost(s.message());
    if (!got.empty()) break;
    if (!wait_ready(c->fd, POLLIN, reply_by)) {
      return PeerFailure("rendezvous: the TCP store server at " + where_ + " did not answer a " +
                         op + " in time (TcpStoreOptions::io_timeout_s " +
                         seconds(options_.io_timeout_s) +
                         " past the deadline); is it hung or overloaded?");
    }
    const ssize_t n = ::recv(c->fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c->in.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      return lost("it closed the connection");
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return lost(std::strerror(errno));
    }
  }
  if (got.size() != 1 || got[0].op != Op::kReply || !c->in.empty()) {
    return lost("it sent what is not one reply to one request");
  }
  *r = std::move(got[0]);
  return Status::OK();
}

Status TcpStore::call_waiting(Message q, Deadline deadline, Message* r) {
  const Deadline start = Clock::now();
  const auto left = std::max(deadline - start, Clock::duration::zero());
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  q.number = ns;  // saturated: Deadline::max() minus now still fits
  const Deadline reply_by =
      saturating_add(std::max(deadline, start), seconds_duration(options_.io_timeout_s));
  const Status s = call(q, reply_by, r);
  if (s.code() == ErrorCode::kPeerFailure && !r->keys.empty() && r->op == Op::kReply) {
    return missing_keys_error(describe(), r->keys, q.keys.size(), left);
  }
  return s;
}

Status TcpStore::set(const std::string& key, const std::string& value) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  Message q, r;
  q.op = Op::kSet;
  q.keys = {key};
  q.value = value;
  return call(q, io_deadline(), &r);
}

Status TcpStore::get(const std::string& key, Deadline deadline, std::string* value) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  Message q, r;
  q.op = Op::kGet;
  q.keys = {key};
  KOLO_RETURN_IF_ERROR(call_waiting(q, deadline, &r));
  *value = std::move(r.value);
  return Status::OK();
}

Status TcpStore::try_get(const std::string& key, std::string* value, bool* found) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  Message q, r;
  q.op = Op::kTryGet;
  q.keys = {key};
  KOLO_RETURN_IF_ERROR(call(q, io_deadline(), &r));
  *found = r.flag != 0;
  if (*found) *value = std::move(r.value);
  return Status::OK();
}

Status TcpStore::check(const std::vector<std::string>& keys, bool* all_exist) {
  for (const auto& key : keys) KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  Message q, r;
  q.op = Op::kCheck;
  q.keys = keys;
  KOLO_RETURN_IF_ERROR(call(q, io_deadline(), &r));
  *all_exist = r.flag != 0;
  return Status::OK();
}

Status TcpStore::add(const std::string& key, std::int64_t delta, std::int64_t* new_value) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  Message q, r;
  q.op = Op::kAdd;
  q.keys = {key};
  q.number = delta;
  KOLO_RETURN_IF_ERROR(call(q, io_deadline(), &r));
  *new_value = r.number;
  return Status::OK();
}

Status TcpStore::compare_set(const std::string& key, const std::string& expected,
                             const std::string& desired, std::string* actual) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  Message q, r;
  q.op = Op::kCompareSet;
  q.keys = {key};
  q.value = expected;
  q.detail = desired;
  KOLO_RETURN_IF_ERROR(call(q, io_deadline(), &r));
  *actual = std::move(r.value);
  return Status::OK();
}

Status TcpStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (const auto& key : keys) KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  Message q, r;
  q.op = Op::kWait;
  q.keys = keys;
  return call_waiting(q, deadline, &r);
}

Status TcpStore::erase(const std::string& key, bool* existed) {
  KOLO_RETURN_IF_ERROR(check_key(describe(), key));
  Message q, r;
  q.op = Op::kErase;
  q.keys = {key};
  KOLO_RETURN_IF_ERROR(call(q, io_deadline(), &r));
  *existed = r.flag != 0;
  return Status::OK();
}

}  // namespace kolo::rendezvous
