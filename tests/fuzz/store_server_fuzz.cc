// Fuzz target: a real TcpStoreServer's connection handling on any bytes. Each input starts
// a server on 127.0.0.1 (with kStoreFuzzSecret, or none), connects one raw socket, writes
// the stream in the input's pieces (store_fuzz_input.h; optionally after a correct hello),
// half-closes, and reads what the server sends until it closes. Checks:
//   - the server closes that connection within 5 s once the peer has hung up;
//   - everything it sent decodes as reply frames (a cut-off last frame is allowed: the
//     server drops unsent replies of a peer that hung up);
//   - it refused the connection (refused() == 1) exactly when the stream breaks a rule
//     (expected_outcome below; after a get or wait that may have parked, later rules are
//     not judged, since the server serves nothing behind a parked request);
//   - afterwards a well-formed TcpStore client is still served (set, then get, in 2 s):
//     the server keeps serving the job.
// Built like store_wire_fuzz.cc (libFuzzer by scripts/fuzz.sh, replay.cc in ctest:
// fuzz.store_server_corpus). Not for: the frame parser alone (store_wire_fuzz.cc is
// faster at that) or several hostile connections at once.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"
#include "rendezvous/tcp_store_wire.h"
#include "store_fuzz_input.h"

namespace {

namespace rdv = kolo::rendezvous;
namespace wire = kolo::rendezvous::wire;
using kolo::Clock;
using kolo::Deadline;

constexpr std::size_t kMaxHelloBytes = 64 * 1024;  // tcp_store_server.cc's limit

void fail(const std::string& what) {
  std::fprintf(stderr, "store_server_fuzz: %s\n", what.c_str());
  std::abort();
}

enum class Outcome { kServed, kRefused, kEither };

// What the server must do with `bytes` from one connection, judged from the rules in
// tcp_store_server.h: a first frame over the hello limit, a malformed frame, anything but
// a hello first, a wrong secret, a later hello or reply, a one-key op with another number
// of keys: refused. Rules after a get or wait that may park (it has a wait time) are
// judged only as "either".
Outcome expected_outcome(std::string bytes, const std::string& secret) {
  if (bytes.size() > kMaxHelloBytes + wire::kLengthBytes) return Outcome::kEither;
  if (bytes.size() >= wire::kLengthBytes) {
    std::size_t first = 0;
    for (int i = 0; i < 4; ++i)
      first |= std::size_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
    if (first > kMaxHelloBytes) return Outcome::kRefused;
  }
  std::vector<wire::Message> got;
  const kolo::Status s = wire::extract(&bytes, &got);
  bool authed = false, may_have_parked = false;
  const Outcome broken = Outcome::kRefused;
  for (const auto& m : got) {
    const Outcome now = may_have_parked ? Outcome::kEither : broken;
    if (!authed) {
      if (m.op != wire::Op::kHello) return now;
      if (!secret.empty() && m.value != secret) return now;
      authed = true;
      continue;
    }
    if (m.op == wire::Op::kHello || m.op == wire::Op::kReply) return now;
    const bool one_key = m.op != wire::Op::kCheck && m.op != wire::Op::kWait;
    if (one_key && m.keys.size() != 1) return now;
    if ((m.op == wire::Op::kGet || m.op == wire::Op::kWait) && m.number > 0) {
      may_have_parked = true;
    }
  }
  if (!s.ok()) return may_have_parked ? Outcome::kEither : broken;
  return Outcome::kServed;
}

int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) fail("connect failed");
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Reads whatever is there without blocking; false at EOF or a reset.
bool read_some(int fd, std::string* in) {
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      in->append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// Writes the pieces (each after a short pause, so the server reads them apart), reading
// replies meanwhile so neither side's buffers fill; then half-closes and reads until the
// server closes. Returns what the server sent.
std::string talk(int fd, const std::vector<std::string>& pieces) {
  std::string replies;
  bool open = true;
  for (const auto& piece : pieces) {
    if (piece.empty()) continue;
    std::size_t at = 0;
    while (open && at < piece.size()) {
      pollfd p{fd, POLLIN | POLLOUT, 0};
      if (::poll(&p, 1, 5000) <= 0) fail("the server neither reads nor writes for 5 s");
      if (p.revents & POLLIN) open = read_some(fd, &replies);
      if (!open || !(p.revents & POLLOUT)) continue;
      const ssize_t n =
          ::send(fd, piece.data() + at, piece.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) at += static_cast<std::size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) open = false;
    }
    if (!open) break;  // the server closed the connection (a refusal)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::shutdown(fd, SHUT_WR);
  const Deadline by = Clock::now() + std::chrono::seconds(5);
  while (open) {
    if (Clock::now() >= by) fail("the server did not close a connection whose peer hung up");
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) open = read_some(fd, &replies);
  }
  return replies;
}

void check_replies(std::string replies) {
  std::vector<wire::Message> got;
  const kolo::Status s = wire::extract(&replies, &got);
  if (!s.ok()) fail("the server sent a bad frame: " + s.message());
  for (const auto& m : got) {
    if (m.op != wire::Op::kReply) fail("the server sent a " + wire::op_name(m.op) + " frame");
  }
}

void check_still_serving(int port, const std::string& secret) {
  rdv::TcpStoreOptions o;
  o.port = port;
  o.secret = secret;
  o.connect_timeout_s = 2;
  o.io_timeout_s = 2;
  std::unique_ptr<rdv::TcpStore> store;
  kolo::Status s = rdv::TcpStore::connect(o, &store);
  if (!s.ok()) fail("a well-formed client cannot connect afterwards: " + s.to_string());
  s = store->set("fuzz/probe", "alive");
  if (!s.ok()) fail("a well-formed client's set fails afterwards: " + s.to_string());
  std::string value;
  s = store->get("fuzz/probe", kolo::deadline_after(2), &value);
  if (!s.ok() || value != "alive")
    fail("a well-formed client's get fails afterwards: " + s.to_string());
}

std::string hello_frame(const std::string& secret) {
  wire::Message m;
  m.op = wire::Op::kHello;
  m.value = secret;
  std::string f;
  if (!wire::encode(m, &f).ok()) fail("the hello does not encode");
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kolo::log::set_level(kolo::log::kOff);  // every refusal logs a warning by design
  const kolo::fuzz::StoreFuzzInput in = kolo::fuzz::parse_store_fuzz_input(data, size);
  const std::string secret = in.no_secret ? std::string() : kolo::fuzz::kStoreFuzzSecret;
  std::vector<std::string> pieces = kolo::fuzz::pieces_of(in);
  if (in.hello) pieces.insert(pieces.begin(), hello_frame(secret));
  std::string bytes;
  for (const auto& p : pieces) bytes += p;

  rdv::TcpStoreServerOptions o;
  o.secret = secret;
  std::unique_ptr<rdv::TcpStoreServer> server;
  const kolo::Status s = rdv::TcpStoreServer::start(o, &server);
  if (!s.ok()) fail("the server does not start: " + s.to_string());
  const int fd = connect_raw(server->port());
  check_replies(talk(fd, pieces));
  ::close(fd);
  const Outcome want = expected_outcome(bytes, secret);
  const int refused = server->refused();
  if (want == Outcome::kRefused && refused != 1) {
    fail("the server served a stream that breaks its rules (refused " + std::to_string(refused) +
         ")");
  }
  if (want == Outcome::kServed && refused != 0) {
    fail("the server refused a well-formed stream (refused " + std::to_string(refused) + ")");
  }
  check_still_serving(server->port(), secret);
  server->stop();
  return 0;
}
