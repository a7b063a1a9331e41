// Small OS helpers of the Gloo transport (gloo_internal.h): the process's sockets and
// their addresses, whether a process of this host is gone, the addresses in gloo's
// messages, and rank lists for messages.
//
// Not for: deciding what a failure means (gloo_communicator.cc, gloo_watch.cc).
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>

#include "transport/gloo/gloo_internal.h"

namespace kolo::transport::gloo_impl {

std::map<unsigned long, int> socket_fds() {
  std::map<unsigned long, int> out;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  const int own = dirfd(dir);
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    char target[64];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(target, "socket:[%lu]", &inode) == 1) out[inode] = static_cast<int>(fd);
  }
  closedir(dir);
  return out;
}

std::string socket_address(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return "";
  char ip[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    return std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
    return "[" + std::string(ip) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "";
}

bool process_gone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A dead child its parent has not reaped yet still answers kill(): read its state.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const std::size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

std::vector<std::string> addresses_in(const std::string& text) {
  static const std::regex kAddress(R"((\[[0-9a-fA-F:.]+\]|\d+\.\d+\.\d+\.\d+):(\d+))");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kAddress);
       it != std::sregex_iterator(); ++it) {
    // gloo writes IPv4 addresses in brackets too ("[127.0.0.1]:4000"); kolo does not.
    std::string host = (*it)[1].str();
    if (host.front() == '[' && host.find(':') == std::string::npos)
      host = host.substr(1, host.size() - 2);
    const int port = std::atoi((*it)[2].str().c_str());
    // Debian's gloo prints ports in network byte order (Address::str() skips ntohs):
    // 39185 reads as 4505. The byte-swapped form comes first; the text as written after.
    const int swapped = ((port & 0xff) << 8) | ((port >> 8) & 0xff);
    out.push_back(host + ":" + std::to_string(swapped));
    if (swapped != port) out.push_back(host + ":" + std::to_string(port));
  }
  return out;
}

}  // namespace kolo::transport::gloo_impl
