// Child processes with piped output, and signals delivered through a pipe (see process.h).
#include "launcher/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <set>
#include <utility>

namespace kolo::launcher {
namespace {

// Write end of the signal pipe. A signal handler can reach nothing else; it is set once
// by route_signals_to_pipe before any handler is installed.
int g_signal_write_fd = -1;

void on_signal(int sig, siginfo_t* info, void*) {
  const int saved = errno;
  SignalEvent e;
  e.signal = sig;
  e.sender = info != nullptr ? info->si_pid : 0;
  // The pipe is non-blocking: if it is full, events are already waiting to be read and
  // dropping this one only loses a repeat.
  [[maybe_unused]] ssize_t n = ::write(g_signal_write_fd, &e, sizeof(e));
  errno = saved;
}

// Signals whose handling the children must not inherit (ignored dispositions survive
// exec; we ignore SIGPIPE so that a vanished reader is an error, not a death).
constexpr int kResetInChild[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGQUIT};

// end_descendants gives up after this, whatever is left.
constexpr auto kLeftoverGiveUp = std::chrono::seconds(5);

// A small write to a pipe (atomic below PIPE_BUF), retried after EINTR.
void write_all_raw(int fd, const void* data, size_t n) {
  while (::write(fd, data, n) < 0 && errno == EINTR) {
  }
}

}  // namespace

int route_signals_to_pipe(std::initializer_list<int> signals) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  g_signal_write_fd = fds[1];
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : signals) ::sigaction(sig, &sa, nullptr);
  return fds[0];
}

std::vector<SignalEvent> read_signal_events(int fd) {
  std::vector<SignalEvent> events;
  SignalEvent e;
  while (::read(fd, &e, sizeof(e)) == static_cast<ssize_t>(sizeof(e))) events.push_back(e);
  return events;
}

namespace {

std::mutex foreign_mu;
std::deque<std::pair<pid_t, int>> foreign_exits;  // guarded by foreign_mu

}  // namespace

void note_foreign_exit(pid_t pid, int status) {
  std::lock_guard<std::mutex> lock(foreign_mu);
  foreign_exits.emplace_back(pid, status);
  if (foreign_exits.size() > 1024) foreign_exits.pop_front();
}

bool take_foreign_exit(pid_t pid, int* status) {
  std::lock_guard<std::mutex> lock(foreign_mu);
  for (auto it = foreign_exits.begin(); it != foreign_exits.end(); ++it) {
    if (it->first != pid) continue;
    *status = it->second;
    foreign_exits.erase(it);
    return true;
  }
  return false;
}

namespace {

// A pseudo-terminal pair {master, slave}, close-on-exec, the slave raw (output as written)
// and never the caller's controlling terminal. False with errno on failure.
bool open_terminal(int fds[2]) {
  const int master = ::open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return false;
  char name[128];
  int slave = -1;
  if (::grantpt(master) == 0 && ::unlockpt(master) == 0 &&
      ::ptsname_r(master, name, sizeof(name)) == 0) {
    slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  }
  termios raw{};
  if (slave < 0 || ::tcgetattr(slave, &raw) != 0) {
    const int err = errno;
    if (slave >= 0) ::close(slave);
    ::close(master);
    errno = err;
    return false;
  }
  ::cfmakeraw(&raw);
  ::tcsetattr(slave, TCSANOW, &raw);
  fds[0] = master;
  fds[1] = slave;
  return true;
}

}  // namespace

Status spawn_piped(const std::vector<std::string>& argv, const SpawnOptions& options, Child* out) {
  if (argv.empty()) return InvalidArgument("no program to run");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  std::vector<char*> envp;
  if (options.environment != nullptr) {
    for (const auto& e : *options.environment) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  int in_pipe[2] = {-1, -1};
  if (options.stdin_pipe && ::pipe2(in_pipe, O_CLOEXEC) != 0) {
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  auto close_in = [&] {
    for (int fd : in_pipe) {
      if (fd >= 0) ::close(fd);
    }
  };
  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (options.stdout_terminal) {
    // {master, slave}, both close-on-exec (the child gets the slave as its fd 1).
    if (!open_terminal(out_pipe)) {
      const int err = errno;
      close_in();
      return Internal(std::string("a pseudo-terminal for the worker's output: ") +
                      std::strerror(err));
    }
  } else if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    close_in();
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    close_in();
    ::close(out_pipe[0]), ::close(out_pipe[1]);
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  // exec_pipe reports an exec failure's errno to the parent; a successful exec closes it.
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    close_in();
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    close_in();
    for (int fd :
         {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], exec_pipe[0], exec_pipe[1]}) {
      ::close(fd);
    }
    return Internal(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    if (options.own_process_group) ::setpgid(0, 0);
    if (options.parent_death_signal != 0) {
      ::prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    }
    if (options.stdin_pipe) {
      ::dup2(in_pipe[0], 0);
    } else if (options.stdin_from_dev_null) {
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, 0);
    }
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    for (int sig : kResetInChild) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (options.environment != nullptr) {
      ::execvpe(args[0], args.data(), envp.data());
    } else {
      ::execvp(args[0], args.data());
    }
    const int err = errno;
    [[maybe_unused]] ssize_t n = ::write(exec_pipe[1], &err, sizeof(err));
    ::_exit(127);
  }
  // Also here, so that a kill(-pid) right after we return cannot miss the group.
  if (options.own_process_group) ::setpgid(pid, pid);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::close(exec_pipe[1]);
  if (in_pipe[0] >= 0) ::close(in_pipe[0]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    if (in_pipe[1] >= 0) ::close(in_pipe[1]);
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return InvalidArgument("cannot run '" + argv[0] + "': " + std::strerror(exec_errno));
  }
  out->pid = pid;
  out->out_fd = out_pipe[0];
  out->err_fd = err_pipe[0];
  out->in_fd = in_pipe[1];
  return Status::OK();
}

pid_t start_guard(pid_t target, double kill_after_seconds, const std::string& cleanup_dir) {
  const pid_t parent = ::getpid();
  // Blocked before fork, so that the guard cannot miss the SIGTERM it waits for.
  sigset_t all, old;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, &old);
  const pid_t pid = ::fork();
  if (pid != 0) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return pid < 0 ? -1 : pid;
  }
  // Guard: only async-signal-safe calls. It holds none of our descriptors (the read ends
  // of mpirun's pipes must close when we die, so that mpirun's writes fail instead of
  // filling them).
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
#endif
  {
    const long max_fd = ::sysconf(_SC_OPEN_MAX);
    for (long fd = 3; fd < (max_fd > 0 ? max_fd : 1024); ++fd) ::close(static_cast<int>(fd));
  }
  if (::getppid() == parent) {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    int sig = 0;
    while (::sigwait(&term, &sig) != 0) {
    }
  }
  ::kill(target, SIGTERM);
  const long polls = static_cast<long>(kill_after_seconds * 10);
  for (long i = 0; i < polls && ::kill(target, 0) == 0; ++i) {
    struct timespec tenth = {0, 100 * 1000 * 1000};
    ::nanosleep(&tenth, nullptr);
  }
  ::kill(-target, SIGKILL);
  if (!cleanup_dir.empty()) {
    // The workers die with mpirun (PR_SET_PDEATHSIG); give them a moment to be gone.
    for (int i = 0; i < 10 && ::kill(target, 0) == 0; ++i) {
      struct timespec tenth = {0, 100 * 1000 * 1000};
      ::nanosleep(&tenth, nullptr);
    }
    remove_job_dir(cleanup_dir);
  }
  ::_exit(0);
}

GroupGuard start_group_guard(double kill_after_seconds) {
  GroupGuard g;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return g;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]), ::close(fds[1]);
    return g;
  }
  if (pid > 0) {
    ::close(fds[0]);
    g.pid = pid;
    g.fd = fds[1];
    return g;
  }
  // Guard: its own process group (a kill of ours must not take it), no descriptors but
  // the pipe's read end, no allocation.
  ::setpgid(0, 0);
  for (int sig : kResetInChild) ::signal(sig, SIG_DFL);
  ::signal(SIGINT, SIG_IGN);  // a terminal's Ctrl-C is kolorun's to handle
  if (::dup2(fds[0], 3) < 0) ::_exit(1);
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, 4U, ~0U, 0U) != 0)
#endif
  {
    const long max_fd = ::sysconf(_SC_OPEN_MAX);
    for (long fd = 4; fd < (max_fd > 0 ? max_fd : 1024); ++fd) ::close(static_cast<int>(fd));
  }
  static pid_t groups[1 << 16];
  size_t count = 0;
  for (;;) {
    pid_t pgid = 0;
    const ssize_t n = ::read(3, &pgid, sizeof pgid);
    if (n < 0 && errno == EINTR) continue;
    if (n == static_cast<ssize_t>(sizeof pgid) && pgid == 0) ::_exit(0);  // a normal end
    if (n != static_cast<ssize_t>(sizeof pgid)) break;                    // we died
    if (count < sizeof groups / sizeof groups[0]) groups[count++] = pgid;
  }
  for (size_t i = 0; i < count; ++i) ::kill(-groups[i], SIGTERM);
  const long polls = static_cast<long>(kill_after_seconds * 10);
  for (long p = 0; p < polls; ++p) {
    bool any = false;
    for (size_t i = 0; i < count && !any; ++i) any = ::kill(-groups[i], 0) == 0;
    if (!any) break;
    struct timespec tenth = {0, 100 * 1000 * 1000};
    ::nanosleep(&tenth, nullptr);
  }
  for (size_t i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  ::_exit(0);
}

void guard_add(const GroupGuard& guard, pid_t pgid) {
  if (guard.fd >= 0 && pgid > 0) {
    write_all_raw(guard.fd, &pgid, sizeof pgid);
  }
}

void end_group_guard(GroupGuard* guard) {
  if (guard->pid <= 0) return;
  const pid_t done = 0;
  write_all_raw(guard->fd, &done, sizeof done);
  ::close(guard->fd);
  guard->fd = -1;
  int status = 0;
  while (::waitpid(guard->pid, &status, 0) < 0 && errno == EINTR) {
  }
  guard->pid = -1;
}

void remove_job_dir(const std::string& dir) {
  if (dir.empty()) return;
  // Twice: a worker that was still starting may have created a file after the first pass.
  for (int pass = 0; pass < 2 && ::rmdir(dir.c_str()) != 0 && errno == ENOTEMPTY; ++pass) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
}

void end_guard(pid_t guard) {
  if (guard <= 0) return;
  ::kill(guard, SIGKILL);
  int status = 0;
  while (::waitpid(guard, &status, 0) < 0 && errno == EINTR) {
  }
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> kids;
  DIR* proc = ::opendir("/proc");
  if (!proc) return kids;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == parent) continue;
    const std::string stat_path = std::string("/proc/") + e->d_name + "/stat";
    FILE* f = std::fopen(stat_path.c_str(), "r");
    if (!f) continue;
    char buf[512];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "pid (comm) state ppid ...": comm may hold spaces and ')', so parse after the last ')'.
    const char* close = std::strrchr(buf, ')');
    char state = 0;
    long ppid = 0;
    if (close && std::sscanf(close + 1, " %c %ld", &state, &ppid) == 2 && ppid == parent &&
        state != 'Z') {
      kids.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(proc);
  return kids;
}

void end_descendants(Clock::duration term_for) {
  const pid_t self = ::getpid();
  const auto start = Clock::now();
  std::set<pid_t> termed;
  for (;;) {
    int status = 0;
    while (::waitpid(-1, &status, WNOHANG) > 0) {
    }
    const std::vector<pid_t> kids = children_of(self);
    const auto now = Clock::now();
    if (kids.empty() || now - start > kLeftoverGiveUp) return;
    const bool kill_now = now - start >= term_for;
    for (pid_t pid : kids) {
      if (kill_now) {
        ::kill(pid, SIGKILL);
      } else if (termed.insert(pid).second) {
        ::kill(pid, SIGTERM);
      }
    }
    ::usleep(10000);
  }
}

int shell_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return 1;
}

int poll_timeout_ms(const Clock::time_point* deadline) {
  // Without a deadline, still 100 ms: the loops around poll() reap their children each
  // time round, so a SIGCHLD whose handler runs late (the sanitizers defer signals to their
  // next interceptor) costs at most that instead of a poll() that never returns.
  if (deadline == nullptr) return 100;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
  if (left.count() <= 0) return 0;
  // Round up so that a wake-up never comes a millisecond before the deadline and spins.
  return static_cast<int>(left.count()) + 1;
}

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

}  // namespace kolo::launcher
