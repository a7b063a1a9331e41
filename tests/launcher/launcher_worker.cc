// A worker for the tests of kolorun's own launcher (own_launcher_test.cc): a plain
// program, no kolo runtime, that uses what kolorun gives it.
//
//   lines N BYTES   prints N lines of BYTES each as fast as it can ("R:I:" then 'a'+R)
//   store           sets "test/<rank>" in the job's store and reads every rank's
//   watch           waits for the first worker exit kolorun publishes and prints its text
//   get KEY...      waits (up to 10 s) for each key of the job's store and prints
//                   "KEY = VALUE" (a ps job's chief reading launcher/task_exit/...)
//   argv_scan       counts the processes whose command line holds the job's secret
//   die SIGNAL      kills itself with SIGNAL
// Not for: anything the kolo runtime does (tests/multiprocess).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/tcp_store.h"

namespace {

using kolo::rendezvous::TcpStore;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int fail(const std::string& what) {
  std::cerr << "launcher_worker: " << what << std::endl;
  return 1;
}

kolo::Status connect(std::unique_ptr<TcpStore>* out) {
  const std::string addr = env("KOLO_RENDEZVOUS_ADDR");
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return kolo::InvalidArgument("KOLO_RENDEZVOUS_ADDR=" + addr);
  kolo::rendezvous::TcpStoreOptions o;
  o.host = addr.substr(0, colon);
  if (o.host.size() > 2 && o.host.front() == '[') o.host = o.host.substr(1, o.host.size() - 2);
  o.port = std::atoi(addr.c_str() + colon + 1);
  o.secret = env("KOLO_RENDEZVOUS_SECRET");
  o.connect_timeout_s = 5;
  o.io_timeout_s = 5;
  return TcpStore::connect(o, out);
}

int lines(int n, int bytes) {
  const int rank = std::atoi(env("KOLO_RANK").c_str());
  for (int i = 0; i < n; ++i) {
    std::string line = std::to_string(rank) + ":" + std::to_string(i) + ":";
    line.resize(static_cast<size_t>(bytes), static_cast<char>('a' + rank));
    line += '\n';
    // Unbuffered, in pieces, so that nothing but kolorun can keep a line whole.
    for (size_t at = 0; at < line.size(); at += 4000) {
      const size_t n_part = std::min<size_t>(4000, line.size() - at);
      if (::write(1, line.data() + at, n_part) != static_cast<ssize_t>(n_part)) return 1;
    }
  }
  return 0;
}

int store() {
  std::unique_ptr<TcpStore> s;
  if (kolo::Status st = connect(&s); !st.ok()) return fail(st.message());
  const std::string rank = env("KOLO_RANK");
  const int size = std::atoi(env("KOLO_SIZE").c_str());
  if (kolo::Status st = s->set("test/" + rank, "hello from " + rank); !st.ok()) {
    return fail(st.message());
  }
  for (int r = 0; r < size; ++r) {
    std::string value;
    kolo::Status st = s->get("test/" + std::to_string(r), kolo::deadline_after(10), &value);
    if (!st.ok()) return fail(st.message());
    if (value != "hello from " + std::to_string(r)) return fail("wrong value " + value);
  }
  std::cout << "store ok" << std::endl;
  return 0;
}

int watch() {
  std::unique_ptr<TcpStore> s;
  if (kolo::Status st = connect(&s); !st.ok()) return fail(st.message());
  if (kolo::Status st = s->wait({"launcher/exits"}, kolo::deadline_after(10)); !st.ok()) {
    return fail(st.message());
  }
  std::string count;
  if (kolo::Status st = s->get("launcher/exits", kolo::deadline_after(1), &count); !st.ok()) {
    return fail(st.message());
  }
  const int size = std::atoi(env("KOLO_SIZE").c_str());
  for (int r = 0; r < size; ++r) {
    std::string text;
    bool found = false;
    if (kolo::Status st = s->try_get("launcher/exit/" + std::to_string(r), &text, &found);
        !st.ok()) {
      return fail(st.message());
    }
    if (found) std::cout << "saw exits=" << count << ": " << text << std::endl;
  }
  return 0;
}

int get(const std::vector<std::string>& keys) {
  std::unique_ptr<TcpStore> s;
  if (kolo::Status st = connect(&s); !st.ok()) return fail(st.message());
  for (const auto& key : keys) {
    std::string value;
    if (kolo::Status st = s->get(key, kolo::deadline_after(10), &value); !st.ok()) {
      return fail(st.message());
    }
    std::cout << key << " = " << value << std::endl;
  }
  return 0;
}

int argv_scan() {
  const std::string secret = env("KOLO_RENDEZVOUS_SECRET");
  if (secret.size() != 32) return fail("secret of " + std::to_string(secret.size()) + " bytes");
  int holding = 0;
  DIR* proc = ::opendir("/proc");
  while (const dirent* e = proc ? ::readdir(proc) : nullptr) {
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    const std::string cmdline((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
    if (cmdline.find(secret) != std::string::npos) ++holding;
  }
  if (proc) ::closedir(proc);
  std::cout << "secret in argv of " << holding << " processes" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "lines" && argc == 4) return lines(std::atoi(argv[2]), std::atoi(argv[3]));
  if (mode == "store") return store();
  if (mode == "watch") return watch();
  if (mode == "get" && argc > 2) return get({argv + 2, argv + argc});
  if (mode == "argv_scan") return argv_scan();
  if (mode == "die" && argc == 3) {
    ::raise(std::atoi(argv[2]));
    return 1;
  }
  return fail(
      "usage: launcher_worker lines N BYTES | store | watch | get KEY... | argv_scan | die "
      "SIGNAL");
}
