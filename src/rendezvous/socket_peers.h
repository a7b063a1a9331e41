// Who is at the other end of a TCP connection to this process: its address as text,
// whether it is on this host (loopback), and for a loopback peer the user that owns its
// socket (from the kernel's socket tables). The TCP store server uses them to let in only
// its own job's processes (docs/rendezvous.md). Not for: sockets themselves (the server).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <string>

namespace kolo::rendezvous {

// "10.0.0.3:51234" or "[::1]:51234".
std::string peer_text(const sockaddr_storage& a);

// 127.0.0.0/8, ::1 or ::ffff:127.x.y.z.
bool is_loopback(const sockaddr_storage& a);

enum class Owner { kFound, kNotFound, kUnreadable };

// The owner (uid) of the loopback peer socket at `peer` connected to our `local`, from
// /proc/net/tcp and tcp6 (the kernel's socket tables of this network namespace):
// kNotFound when it is in neither, kUnreadable when a table cannot be read (*error says
// why).
Owner loopback_peer_uid(const sockaddr_storage& peer, const sockaddr_storage& local, uid_t* uid,
                        std::string* error);

}  // namespace kolo::rendezvous
