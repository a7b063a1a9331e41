// Peers of the TCP store server's connections (socket_peers.h).
#include "rendezvous/socket_peers.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace kolo::rendezvous {
namespace {

// One end of a TCP connection as the kernel's socket table prints it: an address as 32-bit
// words (in memory order, %08X; 1 for IPv4, 4 for IPv6) and a port (host order, %04X).
struct TableEnd {
  std::uint32_t words[4] = {};
  int nwords = 0;
  unsigned port = 0;
};

// The owner of the socket whose local end is `them` and remote end `us`, in tcp (1-word
// ends) or tcp6 (4-word ends).
Owner find_in_table(const TableEnd& them, const TableEnd& us, uid_t* uid, std::string* error) {
  const char* path = them.nwords == 1 ? "/proc/net/tcp" : "/proc/net/tcp6";
  std::ifstream table(path);
  std::string line;
  if (!table.is_open() || !std::getline(table, line)) {  // the header
    *error = std::string("cannot read ") + path + ": " + std::strerror(errno);
    return Owner::kUnreadable;
  }
  auto parse = [](const char* text, int nwords, TableEnd* e) {
    for (int w = 0; w < nwords; ++w) {
      unsigned word = 0;
      if (std::sscanf(text + 8 * w, "%8X", &word) != 1) return false;
      e->words[w] = word;
    }
    return std::sscanf(text + 8 * nwords, ":%4X", &e->port) == 1;
  };
  while (std::getline(table, line)) {
    // "  sl  local_address rem_address   st tx_queue:rx_queue tr:when retrnsmt   uid ..."
    char local_text[64], remote_text[64];
    unsigned st = 0, owner = 0;
    if (std::sscanf(line.c_str(), " %*d: %63s %63s %X %*s %*s %*s %u", local_text, remote_text, &st,
                    &owner) != 4) {
      continue;
    }
    TableEnd l, r;
    l.nwords = r.nwords = them.nwords;
    if (!parse(local_text, them.nwords, &l) || !parse(remote_text, them.nwords, &r)) continue;
    const auto same = [](const TableEnd& x, const TableEnd& y) {
      return x.port == y.port && std::memcmp(x.words, y.words, 4 * x.nwords) == 0;
    };
    if (same(l, them) && same(r, us)) {
      *uid = static_cast<uid_t>(owner);
      return Owner::kFound;
    }
  }
  return Owner::kNotFound;
}

}  // namespace

std::string peer_text(const sockaddr_storage& a) {
  char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
  ::getnameinfo(reinterpret_cast<const sockaddr*>(&a), sizeof(a), host, sizeof(host), serv,
                sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV);
  const bool v6 = a.ss_family == AF_INET6;
  return (v6 ? "[" : "") + std::string(host) + (v6 ? "]:" : ":") + serv;
}

bool is_loopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

Owner loopback_peer_uid(const sockaddr_storage& peer, const sockaddr_storage& local, uid_t* uid,
                        std::string* error) {
  auto end_of = [](const sockaddr_storage& a, TableEnd* e) {
    if (a.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
      e->words[0] = in->sin_addr.s_addr;
      e->nwords = 1;
      e->port = ntohs(in->sin_port);
      return;
    }
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    e->port = ntohs(in6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      std::memcpy(&e->words[0], &in6->sin6_addr.s6_addr[12], 4);
      e->nwords = 1;
    } else {
      std::memcpy(e->words, in6->sin6_addr.s6_addr, 16);
      e->nwords = 4;
    }
  };
  TableEnd them, us;
  end_of(peer, &them);
  end_of(local, &us);
  if (them.nwords != us.nwords) return Owner::kNotFound;
  const Owner found = find_in_table(them, us, uid, error);
  if (found != Owner::kNotFound || them.nwords == 4) return found;
  // An IPv6 socket of the peer's (connected to ::ffff:127.0.0.1) is listed in tcp6, both
  // ends in their v4-mapped form (another user's process could slip past otherwise).
  const auto mapped = [](const TableEnd& e) {
    TableEnd m;
    m.nwords = 4;
    m.port = e.port;
    const unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    std::memcpy(m.words, prefix, 12);
    m.words[3] = e.words[0];
    return m;
  };
  return find_in_table(mapped(them), mapped(us), uid, error);
}

}  // namespace kolo::rendezvous
