// Host list and hostfile parsing for kolorun (see hosts.h).
#include "launcher/hosts.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace kolo::launcher {
namespace {

// Slot counts above this are almost certainly typos; mpirun would try to start them.
constexpr long kMaxSlots = 1 << 20;

bool parse_slots(const std::string& text, int* out) {
  if (text.empty()) return false;
  long v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
    if (v > kMaxSlots) return false;
  }
  if (v < 1) return false;
  *out = static_cast<int>(v);
  return true;
}

// Host names go to mpirun (and from there to ssh) unquoted, so keep to the characters
// of DNS names and IPv4 addresses; a name that starts with '-' would be read as an
// option ("-oProxyCommand=..." runs a command). Returns "" for a good name, else why not.
std::string host_name_error(const std::string& host) {
  if (!host.empty() && host[0] == '-') {
    return "'" + host + "' is not a host name: it starts with '-', which mpirun and ssh " +
           "would read as an option";
  }
  bool ok = !host.empty();
  for (char c : host) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '-' || c == '_');
  }
  return ok ? "" : "'" + host + "' is not a host name (letters, digits, '.', '-', '_')";
}

void add_host(std::vector<HostSlots>* hosts, const std::string& host, int slots) {
  for (auto& h : *hosts) {
    if (h.host == host) {
      h.slots += slots;
      return;
    }
  }
  hosts->push_back({host, slots});
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

}  // namespace

Status parse_host_list(const std::string& text, std::vector<HostSlots>* out) {
  std::vector<HostSlots> hosts;
  if (trim(text).empty())
    return InvalidArgument("empty host list: expected host1:slots,host2:slots");
  std::stringstream ss(text);
  std::string entry;
  while (std::getline(ss, entry, ',')) {
    entry = trim(entry);
    if (entry.empty()) {
      return InvalidArgument("host list '" + text + "' has an empty entry");
    }
    std::string host = entry;
    int slots = 1;
    if (const size_t colon = entry.rfind(':'); colon != std::string::npos) {
      host = entry.substr(0, colon);
      if (!parse_slots(entry.substr(colon + 1), &slots)) {
        return InvalidArgument("host list entry '" + entry +
                               "': slots must be a whole number >= 1 after ':'");
      }
    }
    if (const std::string why = host_name_error(host); !why.empty()) {
      return InvalidArgument("host list entry '" + entry + "': " + why);
    }
    add_host(&hosts, host, slots);
  }
  if (!text.empty() && text.back() == ',') {
    return InvalidArgument("host list '" + text + "' has an empty entry");
  }
  *out = std::move(hosts);
  return Status::OK();
}

Status parse_hostfile(const std::string& text, const std::string& source,
                      std::vector<HostSlots>* out) {
  std::vector<HostSlots> hosts;
  std::stringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    const std::string where = source + ":" + std::to_string(number) + ": ";
    if (line.size() > kMaxHostfileLine) {
      return InvalidArgument(where + "line is longer than " + std::to_string(kMaxHostfileLine) +
                             " bytes; is " + source + " a hostfile?");
    }
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::stringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    if (const std::string why = host_name_error(host); !why.empty()) {
      return InvalidArgument(where + why);
    }
    int slots = 1;
    bool have_slots = false;
    while (words >> word) {
      if (word.rfind("slots=", 0) != 0) {
        return InvalidArgument(where + "unexpected '" + word +
                               "': expected 'HOST' or 'HOST slots=N'");
      }
      if (have_slots) return InvalidArgument(where + "slots= given twice");
      if (!parse_slots(word.substr(6), &slots)) {
        return InvalidArgument(where + "'" + word + "': slots must be a whole number >= 1");
      }
      have_slots = true;
    }
    add_host(&hosts, host, slots);
  }
  if (hosts.empty()) return InvalidArgument(source + ": no hosts listed");
  *out = std::move(hosts);
  return Status::OK();
}

Status read_hostfile(const std::string& path, std::vector<HostSlots>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return InvalidArgument("cannot read hostfile " + path + ": " + std::strerror(errno));
  }
  // Read at most one byte past the limit: enough to know the file is too large, and a
  // device such as /dev/zero cannot make kolorun read (and keep) without bound.
  std::string text;
  char buf[65536];
  while (text.size() <= kMaxHostfileBytes) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return InvalidArgument("cannot read hostfile " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (text.size() > kMaxHostfileBytes) {
    return InvalidArgument("hostfile " + path + " is larger than " +
                           std::to_string(kMaxHostfileBytes) + " bytes; is it the right file?");
  }
  return parse_hostfile(text, path, out);
}

int total_slots(const std::vector<HostSlots>& hosts) {
  long total = 0;
  for (const auto& h : hosts) total += h.slots;
  return total > kMaxSlots ? static_cast<int>(kMaxSlots) : static_cast<int>(total);
}

std::string format_host_list(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const auto& h : hosts) {
    if (!s.empty()) s += ',';
    s += h.host + ":" + std::to_string(h.slots);
  }
  return s;
}

}  // namespace kolo::launcher
