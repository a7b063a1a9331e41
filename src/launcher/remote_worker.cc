// The wrapper ssh runs for a worker on another host (see remote_worker.h).
#include "launcher/remote_worker.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "launcher/event_loop.h"
#include "launcher/events.h"
#include "launcher/lines.h"
#include "launcher/process.h"
#include "launcher/threads.h"
#include "launcher/worker_plan.h"
#include "startup/config.h"

namespace kolo::launcher {
namespace {

// kolorun writes the header right after ssh starts; ssh's own start-up (keys, a slow
// DNS) is the only wait.
constexpr auto kHeaderTimeout = std::chrono::seconds(30);
constexpr size_t kMaxHeader = 64 * 1024;
constexpr auto kKillAfter = std::chrono::seconds(2);

void say(const std::string& text) { write_all(2, "kolorun --remote-worker: " + text + "\n"); }

// Reads "NAME=VALUE" lines up to an empty one from stdin into the environment.
bool read_secrets() {
  const auto deadline = Clock::now() + kHeaderTimeout;
  std::string line;
  size_t total = 0;
  bool readable = false;
  PollSet step;
  step.add(0, [&readable] { readable = true; });
  for (;;) {
    readable = false;
    if (!step.wait(deadline).ok() || !readable) {
      say("no job secrets on stdin within 30 s (this mode is for kolorun's ssh sessions)");
      return false;
    }
    char c;
    const ssize_t n = ::read(0, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || ++total > kMaxHeader) {
      say("stdin ended (or grew past 64 KiB) before the job secrets did");
      return false;
    }
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line.empty()) return true;
    std::string name, value;
    if (!parse_secret_line(line, &name, &value)) {
      say("malformed line in the job secrets on stdin");
      return false;
    }
    ::setenv(name.c_str(), value.c_str(), 1);
    line.clear();
  }
}

int local_size_from_env() {
  const char* v = std::getenv("KOLO_LOCAL_SIZE");
  const int n = v ? std::atoi(v) : 1;
  return n > 0 ? n : 1;
}

}  // namespace

int run_remote_worker(const std::vector<std::string>& args) {
  size_t i = 0;
  if (i < args.size() && args[i] == "--") ++i;
  if (i >= args.size()) {
    say("expected -- PROGRAM [ARGS...]");
    return 2;
  }
  const std::vector<std::string> program(args.begin() + static_cast<long>(i), args.end());
  ::signal(SIGPIPE, SIG_IGN);
  const int signal_fd = route_signals_to_pipe({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  if (!read_secrets()) return 1;
  const char* token_env = std::getenv(kTokenVar);
  const std::string token = token_env ? token_env : "";
  ::unsetenv(kTokenVar);  // kolorun's and ours: the program does not see it (events.h)
  set_default_worker_threads(local_size_from_env());

  WorkerExit result;
  const char* rank = std::getenv("KOLO_RANK");
  result.rank = rank ? std::atoi(rank) : 0;
  const char* host = std::getenv(kHostAddrVar);
  result.host = host ? host : "?";

  Child child;
  SpawnOptions spawn;
  spawn.own_process_group = true;
  spawn.parent_death_signal = SIGKILL;
  spawn.stdin_from_dev_null = true;
  spawn.stdout_terminal = true;  // printf lines as printed, as mpirun's workers get
  if (Status s = spawn_piped(program, spawn, &child); !s.ok()) {
    say(s.message());
    result.exit_code = 127;
    write_all(2, format_exit_event(result, token) + "\n");
    return 127;
  }
  OutputReader output(child.out_fd, child.err_fd);
  // Whether an update of the current line went out on stdout, stderr (terminal only).
  bool redrawn[3] = {false, false, false};
  auto line_to = [&](int fd) {
    return [&redrawn, fd](std::string_view line) {
      std::string text = redrawn[fd] ? "\r" : "";
      redrawn[fd] = false;
      text.append(line);
      text += '\n';
      write_all(fd, text);
    };
  };
  const bool terminal = kolorun_on_terminal(core::process_env());
  auto redraw_to = [&](int fd) -> LineSplitter::Sink {
    if (!terminal) return nullptr;
    return [&redrawn, fd](std::string_view update) {
      redrawn[fd] = true;
      write_all(fd, "\r" + std::string(update));
    };
  };
  const LineSplitter::Sink to_stdout = line_to(1), to_stderr = line_to(2);
  const LineSplitter::Sink redraw_stdout = redraw_to(1), redraw_stderr = redraw_to(2);
  bool exited = false, stopping = false, stdin_open = true;
  std::optional<Clock::time_point> kill_at, drain_until;
  auto stop = [&] {
    if (stopping) return;
    stopping = true;
    result.stop = Stop::kByJob;
    ::kill(-child.pid, SIGTERM);
    kill_at = Clock::now() + kKillAfter;
  };
  while (!exited || (output.open() && Clock::now() < *drain_until)) {
    PollSet step;
    step.add(&output, to_stdout, to_stderr, redraw_stdout, redraw_stderr);
    if (stdin_open) {
      step.add(0, [&] {
        char buf[256];
        const ssize_t n = ::read(0, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
          stdin_open = false;  // kolorun is done with this worker, or gone
          stop();
        }
      });
    }
    step.add_signals(signal_fd, [&](const SignalEvent&) { stop(); });
    Deadlines wake;
    wake.consider(drain_until, exited);
    wake.consider(kill_at, !exited);
    if (!step.wait(wake.earliest()).ok()) break;
    int status = 0;
    if (!exited && ::waitpid(child.pid, &status, WNOHANG) == child.pid) {
      exited = true;
      drain_until = Clock::now() + (stopping ? kRemoteDrainWhenStopped : kDrainAfterExit);
      if (WIFSIGNALED(status)) {
        result.signal = WTERMSIG(status);
      } else {
        result.exit_code = shell_status(status);
      }
    }
    if (!exited && kill_at && Clock::now() >= *kill_at) {
      ::kill(-child.pid, SIGKILL);
      kill_at.reset();
    }
  }
  output.finish(to_stdout, to_stderr);
  ::kill(-child.pid, SIGKILL);  // whatever the program left in its group
  write_all(2, format_exit_event(result, token) + "\n");
  return result.status();
}

}  // namespace kolo::launcher
