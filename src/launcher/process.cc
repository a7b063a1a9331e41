// Child processes with piped output, and signals delivered through a pipe (see process.h).
#include "launcher/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

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

Status spawn_piped(const std::vector<std::string>& argv, const SpawnOptions& options, Child* out) {
  if (argv.empty()) return InvalidArgument("no program to run");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    return Internal(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]), ::close(out_pipe[1]);
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  // exec_pipe reports an exec failure's errno to the parent; a successful exec closes it.
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
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
    if (options.stdin_from_dev_null) {
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, 0);
    }
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    for (int sig : kResetInChild) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(args[0], args.data());
    const int err = errno;
    [[maybe_unused]] ssize_t n = ::write(exec_pipe[1], &err, sizeof(err));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::close(exec_pipe[1]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return InvalidArgument("cannot run '" + argv[0] + "': " + std::strerror(exec_errno));
  }
  out->pid = pid;
  out->out_fd = out_pipe[0];
  out->err_fd = err_pipe[0];
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

int shell_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return 1;
}

int poll_timeout_ms(const Clock::time_point* deadline) {
  if (deadline == nullptr) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
  if (left.count() <= 0) return 0;
  // Round up so that a wake-up never comes a millisecond before the deadline and spins.
  return static_cast<int>(left.count()) + 1;
}

}  // namespace kolo::launcher
