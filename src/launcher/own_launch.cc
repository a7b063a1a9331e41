// kolorun's own launcher (own_launch.h): the job's store and secret, the addresses the
// workers reach it at, then the job (job.h), the parameter-server job (ps_plan.h) or the
// elastic driver (elastic_driver.h).
#include "launcher/own_launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>

#include "launcher/elastic_args.h"
#include "launcher/hosts.h"
#include "launcher/layout.h"
#include "launcher/lines.h"
#include "launcher/ps_plan.h"
#include "launcher/threads.h"
#include "launcher/worker_plan.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"
#include "startup/config.h"

namespace kolo::launcher {
namespace {

// 32 hex digits from /dev/urandom: the job's rendezvous secret ("" if unreadable).
std::string make_secret() {
  unsigned char bytes[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const bool ok = ::read(fd, bytes, sizeof bytes) == static_cast<ssize_t>(sizeof bytes);
  ::close(fd);
  if (!ok) return "";
  std::string hex;
  char two[3];
  for (unsigned char b : bytes) {
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return hex;
}

// The address of this host's interface towards `host` (a UDP socket's connect() sends
// nothing; getsockname then says which local address the route uses).
Status address_towards(const std::string& host, std::string* out) {
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  struct addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    return InvalidArgument("cannot resolve host " + host + ": " + ::gai_strerror(rc));
  }
  Status result = InvalidArgument("no route from this host to " + host);
  for (auto* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    struct sockaddr_storage local = {};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&local), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<struct sockaddr*>(&local), len, text, sizeof text, nullptr,
                      0, NI_NUMERICHOST) == 0) {
      *out = text;
      result = Status::OK();
    }
    ::close(fd);
    if (result.ok()) break;
  }
  ::freeaddrinfo(found);
  return result;
}

// `n` ports that are free on this host now (bound to port 0 on every interface, all at
// once so that they differ, then released for the tasks to bind). A task that finds its
// port taken in between says so itself.
Status free_local_ports(int n, std::vector<int>* out) {
  std::vector<int> fds;
  Status result = Status::OK();
  for (int i = 0; i < n && result.ok(); ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&a), &len) != 0) {
      result = InvalidArgument(std::string("cannot find a free port on this host: ") +
                               std::strerror(errno));
    } else {
      out->push_back(ntohs(a.sin_port));
    }
    if (fd >= 0) fds.push_back(fd);
  }
  for (int fd : fds) ::close(fd);
  return result;
}

std::string current_dir() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) != nullptr ? std::string(buf) : std::string(".");
}

// Prints each worker's command as --dry-run shows it.
void print_dry_run(const std::vector<WorkerPlan>& workers) {
  for (const auto& w : workers) {
    std::vector<std::string> words = w.argv;
    if (!w.remote) {
      words = {"env"};
      for (const auto& [name, value] : w.vars) words.push_back(name + "=" + value);
      words.insert(words.end(), w.argv.begin(), w.argv.end());
    }
    std::cout << "[" << worker_label(w) << "] " << w.host << ": " << shell_join(words) << "\n";
  }
  std::cout << std::flush;
}

}  // namespace

int kolorun_error(const std::string& message) {
  std::cerr << "kolorun: " << message << "\n";
  return 2;
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "kolorun";
  return std::string(buf, static_cast<size_t>(n));
}

// The names under which a host list may mention this machine.
std::vector<std::string> this_host_names() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return {};
  std::string name = buf;
  std::vector<std::string> names = {name};
  if (const size_t dot = name.find('.'); dot != std::string::npos) {
    names.push_back(name.substr(0, dot));
  }
  // And the addresses of its interfaces: -H 10.77.0.1:2 names this host too.
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      const int family = i->ifa_addr->sa_family;
      if (family != AF_INET && family != AF_INET6) continue;
      char host[NI_MAXHOST];
      const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      if (::getnameinfo(i->ifa_addr, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0) {
        names.emplace_back(host);
      }
    }
    ::freeifaddrs(list);
  }
  return names;
}

// kolorun's own launcher: the job's store, then every worker (job.h), or the elastic
// driver (elastic_driver.h) when `elastic` is given (its hosts are request.hosts).
int run_own(const LaunchRequest& request, const OwnLaunch& own, ElasticOptions* elastic) {
  const auto names = this_host_names();
  // An elastic job whose script may add other hosts listens beyond this host when it
  // knows where they reach it: --rendezvous-addr, or a first host that is one of this
  // host's own addresses (the script's "10.0.0.1:4"; not a host name, which may resolve
  // to 127.0.1.1). Else the job stays on this host and the driver warns about others.
  const bool may_grow = elastic && !elastic->discovery_script.empty();
  std::optional<std::string> own_address;
  if (may_grow && own.rendezvous_addr.empty()) {
    own_address = this_host_address(request.hosts, names);
  }
  const bool one_host = runs_on_this_host_only(request, names) &&
                        !(may_grow && (!own.rendezvous_addr.empty() || own_address));
  if (elastic != nullptr) elastic->this_host_only = one_host;
  PlanInputs in;
  in.env = core::process_env();
  in.this_host_names = names;
  in.self_exe = self_exe();
  in.cwd = current_dir();
  in.cores = usable_cores();
  if (own.ssh_port > 0) in.ssh_port = own.ssh_port;
  if (!own.ssh_identity_file.empty())
    in.ssh_options.insert(in.ssh_options.end(), {"-i", own.ssh_identity_file});
  if (!own.ssh_config.empty()) in.ssh_options.insert(in.ssh_options.end(), {"-F", own.ssh_config});
  std::string host = "127.0.0.1";
  if (!one_host) {
    if (own_address) {
      host = *own_address;
    } else if (auto chosen = rendezvous_host(request.hosts, names, own.rendezvous_addr)) {
      host = *chosen;
    } else {
      const std::string remote = first_remote_host(request.hosts, names);
      if (Status s = address_towards(remote, &host); !s.ok() && own.dry_run) {
        host = "THIS_HOST";  // a dry run of hosts this machine cannot resolve
      } else if (!s.ok()) {
        return kolorun_error("cannot tell which address of this host the workers on " + remote +
                             " reach the job's store at (" + s.message() +
                             "); give it with --rendezvous-addr");
      }
    }
    in.this_host_addr = host;
  }
  const std::string secret = make_secret();
  if (secret.empty()) return kolorun_error("cannot read /dev/urandom for the job's secret");
  std::unique_ptr<rendezvous::TcpStoreServer> server;
  std::unique_ptr<rendezvous::TcpStore> store;
  if (own.dry_run) {
    in.rendezvous_addr = host_port(host, 0);
    in.rendezvous_addr.replace(in.rendezvous_addr.size() - 1, 1, "PORT");
  } else {
    rendezvous::TcpStoreServerOptions so;
    so.host = one_host ? "127.0.0.1" : "0.0.0.0";
    so.secret = secret;
    if (Status s = rendezvous::TcpStoreServer::start(so, &server); !s.ok()) {
      return kolorun_error("cannot start the job's store: " + s.message());
    }
    in.rendezvous_addr = host_port(host, server->port());
    rendezvous::TcpStoreOptions co;
    co.port = server->port();
    co.secret = secret;
    co.connect_timeout_s = 5;
    co.io_timeout_s = 5;
    if (Status s = rendezvous::TcpStore::connect(co, &store); !s.ok()) {
      return kolorun_error("cannot reach the job's own store: " + s.message());
    }
  }
  if (elastic != nullptr) {
    elastic->inputs = in;
    elastic->program = request.program;
    if (own.dry_run) {
      const PlanResult plan = first_plan(*elastic);
      if (plan.wait) {
        std::cout << "kolorun: generation 0 would wait for slots: " << plan.workers
                  << " usable of --min-np " << elastic->min_np << std::endl;
        return 0;
      }
      std::vector<WorkerPlan> workers;
      for (size_t rank = 0; rank < plan.members.size(); ++rank) {
        workers.push_back(elastic_worker_plan(*elastic, plan.members, static_cast<int>(rank), 0));
      }
      print_dry_run(workers);
      return 0;
    }
    elastic->rendezvous_secret = secret;
    elastic->event_token = make_event_token();
    elastic->grace_seconds = request.grace_seconds;
    elastic->terminal = is_terminal(in.env, 1);
    elastic->store = store.get();
    const int status = run_elastic_job(*elastic);
    store.reset();
    server->stop();
    return status;
  }
  JobOptions job;
  if (request.parameter_server()) {
    auto tasks = place_ps_tasks(request, names, in.this_host_addr);
    std::vector<int> ports;
    if (Status s = free_local_ports(local_ports_needed(tasks), &ports); !s.ok()) {
      return kolorun_error(s.message());
    }
    std::random_device random;
    const int span = kRemotePortHigh - kRemotePortLow - ps_task_count(request);
    const int remote_base =
        kRemotePortLow + static_cast<int>(random() % static_cast<unsigned>(span));
    assign_ports(ports, remote_base, &tasks);
    job.workers = plan_ps_tasks(request, in, tasks);
    job.parameter_server = true;
    job.max_restarts = request.max_restarts;
  } else {
    job.workers = plan_workers(request, in);
  }
  if (own.dry_run) {
    print_dry_run(job.workers);
    return 0;
  }
  job.rendezvous_secret = secret;
  job.event_token = make_event_token();
  job.grace_seconds = request.grace_seconds;
  job.terminal = is_terminal(in.env, 1);
  job.store = store.get();
  const int status = run_job(job);
  store.reset();
  server->stop();
  return status;
}

// Checks an elastic job's options, finds its first hosts and runs it (elastic_driver.h).
int run_elastic_main(const ElasticArgs& a, const OwnLaunch& own) {
  ElasticOptions e;
  LaunchRequest request;
  if (Status s = elastic_options_from_args(a, &e, &request); !s.ok()) {
    return kolorun_error(s.message());
  }
  LaunchRequest processes = request;
  processes.np = e.max_np > 0 ? e.max_np : std::max(request.np, total_slots(request.hosts));
  prepare_worker_threads(processes, core::process_env(), this_host_names(),
                         /*announce=*/!own.dry_run);
  return run_own(request, own, &e);
}

}  // namespace kolo::launcher
