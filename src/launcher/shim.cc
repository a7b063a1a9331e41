// The per-worker shim that mpirun runs (see shim.h).
#include "launcher/shim.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "launcher/event_loop.h"
#include "launcher/events.h"
#include "launcher/lines.h"
#include "launcher/process.h"
#include "launcher/threads.h"
#include "startup/config.h"

namespace kolo::launcher {
namespace {

// How long leftovers get between SIGTERM and SIGKILL.
constexpr auto kLeftoverTerm = std::chrono::seconds(1);

bool read_int(const std::map<std::string, std::string>& env, const char* name, int* out) {
  auto it = env.find(name);
  if (it == env.end()) return false;
  char* end = nullptr;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v < 0 || v > (1 << 30)) return false;
  *out = static_cast<int>(v);
  return true;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

void say(const std::string& prefix, const std::string& text) {
  write_all(2, prefix + "kolorun: " + text + "\n");
}

// Waits for a stop signal from mpirun (or anyone) until `linger` has passed.
void linger_until_stopped(int signal_fd, double linger_seconds) {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<long>(linger_seconds * 1000));
  bool stopped = false;
  PollSet step;
  step.add_signals(signal_fd, [&stopped](const SignalEvent&) { stopped = true; });
  while (!stopped && Clock::now() < deadline) {
    if (!step.wait(deadline).ok()) return;
  }
}

}  // namespace

Status parse_shim_args(const std::vector<std::string>& args, ShimOptions* out) {
  ShimOptions o;
  size_t i = 0;
  if (i < args.size() && args[i] == "--worker-shim") ++i;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    const std::string flag = "--linger-seconds=";
    if (a.rfind(flag, 0) != 0) return InvalidArgument("worker shim: unknown argument '" + a + "'");
    char* end = nullptr;
    o.linger_seconds = std::strtod(a.c_str() + flag.size(), &end);
    if (*end != '\0' || !(o.linger_seconds >= 0)) {
      return InvalidArgument("worker shim: bad " + a);
    }
  }
  if (i >= args.size() || i + 1 >= args.size()) {
    return InvalidArgument("worker shim: expected -- PROGRAM [ARGS...]");
  }
  o.program.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  *out = std::move(o);
  return Status::OK();
}

Status ranks_from_env(const std::map<std::string, std::string>& env, WorkerRanks* out,
                      std::string* warning) {
  int rank = 0, size = 0;
  if (!read_int(env, "OMPI_COMM_WORLD_RANK", &rank) ||
      !read_int(env, "OMPI_COMM_WORLD_SIZE", &size) || size < 1) {
    return InvalidArgument(
        "the worker shim must be started by mpirun (OMPI_COMM_WORLD_RANK and "
        "OMPI_COMM_WORLD_SIZE are not set); run kolorun without --worker-shim");
  }
  std::vector<int> layout = {size};
  if (auto it = env.find(kHostSlotsVar); it != env.end()) {
    KOLO_RETURN_IF_ERROR(parse_layout(it->second, &layout));
  }
  long total = 0;
  for (int c : layout) total += c;
  if (total != size) {
    return InvalidArgument(std::string(kHostSlotsVar) + "=" + format_layout(layout) +
                           " describes " + std::to_string(total) + " workers but mpirun started " +
                           std::to_string(size));
  }
  WorkerRanks r;
  KOLO_RETURN_IF_ERROR(compute_ranks(layout, rank, &r));
  int ompi_local_rank = 0, ompi_local_size = 0;
  if (read_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", &ompi_local_rank) &&
      read_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", &ompi_local_size) &&
      (ompi_local_rank != r.local_rank || ompi_local_size != r.local_size)) {
    *warning = "mpirun placed rank " + std::to_string(rank) + " as local rank " +
               std::to_string(ompi_local_rank) + " of " + std::to_string(ompi_local_size) +
               " but the layout " + format_layout(layout) + " says " +
               std::to_string(r.local_rank) + " of " + std::to_string(r.local_size) +
               "; using mpirun's local values (cross ranks may be wrong)";
    r.local_rank = ompi_local_rank;
    r.local_size = ompi_local_size;
  }
  *out = r;
  return Status::OK();
}

std::map<std::string, std::string> rank_variables(const WorkerRanks& r) {
  return {
      {"KOLO_RANK", std::to_string(r.rank)},
      {"KOLO_SIZE", std::to_string(r.size)},
      {"KOLO_LOCAL_RANK", std::to_string(r.local_rank)},
      {"KOLO_LOCAL_SIZE", std::to_string(r.local_size)},
      {"KOLO_CROSS_RANK", std::to_string(r.cross_rank)},
      {"KOLO_CROSS_SIZE", std::to_string(r.cross_size)},
  };
}

int run_shim(const ShimOptions& options) {
  // If mpirun (or the orted that started us) dies, nobody reads our output or will stop
  // us: go with it. The program gets the same from us (parent_death_signal below).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Orphaned descendants of the program (a daemon that left with setsid) become the
  // shim's children instead of init's, so that it can end them (end_descendants).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::signal(SIGPIPE, SIG_IGN);
  const int signal_fd = route_signals_to_pipe({SIGINT, SIGTERM, SIGHUP, SIGCHLD});

  WorkerRanks ranks;
  std::string warning;
  if (Status s = ranks_from_env(core::process_env(), &ranks, &warning); !s.ok()) {
    say("", s.message());
    return 1;
  }
  // Built piecewise: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string&&.
  std::string prefix = "[";
  prefix += std::to_string(ranks.rank);
  prefix += "] ";
  if (!warning.empty()) say(prefix, "warning: " + warning);
  for (const auto& [name, value] : rank_variables(ranks)) ::setenv(name.c_str(), value.c_str(), 1);
  set_default_worker_threads(ranks.local_size);  // OMP_NUM_THREADS, unless the user set it
  // The marker token is kolorun's and the shim's; the program does not see it (events.h).
  const char* token_env = std::getenv(kTokenVar);
  const std::string token = token_env ? token_env : "";
  ::unsetenv(kTokenVar);

  WorkerExit result;
  result.rank = ranks.rank;
  result.host = host_name();

  bool linger = true;
  Child child;
  SpawnOptions spawn;
  spawn.parent_death_signal = SIGKILL;
  spawn.stdout_terminal = true;  // printf lines as printed (the shim's own stdout is mpirun's)
  if (Status s = spawn_piped(options.program, spawn, &child); !s.ok()) {
    say(prefix, s.message());
    result.exit_code = 127;  // what a shell reports for a program it cannot run
  } else {
    OutputReader output(child.out_fd, child.err_fd);
    auto to_stdout = [&](std::string_view line) {
      write_all(1, prefix + std::string(line) + "\n");
    };
    auto to_stderr = [&](std::string_view line) {
      write_all(2, prefix + std::string(line) + "\n");
    };
    // On a terminal (KOLO_TERMINAL=1 from kolorun), an in-place update goes out as a whole
    // line "\r[rank] TEXT": mpirun merges every shim's output into one stream, where an
    // unfinished line would run into another worker's. kolorun's parent shows these lines
    // in place (supervisor.h); the line they end as comes as usual.
    LineSplitter::Sink redraw_stdout, redraw_stderr;
    if (kolorun_on_terminal(core::process_env())) {
      redraw_stdout = [&](std::string_view text) {
        write_all(1, "\r" + prefix + std::string(text) + "\n");
      };
      redraw_stderr = [&](std::string_view text) {
        write_all(2, "\r" + prefix + std::string(text) + "\n");
      };
    }
    bool exited = false;
    bool stop_requested = false;
    std::optional<Deadline> drain_deadline;  // once the program exited
    while (!exited || (output.open() && Clock::now() < *drain_deadline)) {
      PollSet step;
      step.add(&output, to_stdout, to_stderr, redraw_stdout, redraw_stderr);
      step.add_signals(signal_fd, [&](const SignalEvent& e) {
        // The process that started the shim (mpirun, or its orted on another host) stops
        // it only when the job is being ended; a signal from anyone else is a cause.
        if (!stop_requested) {
          result.stop = e.sender == ::getppid() ? Stop::kByJob : Stop::kFromOutside;
        }
        stop_requested = true;
        // mpirun signals the whole process group, which includes the program; passing
        // its signals on as well would deliver them twice.
        if (e.sender != ::getppid()) ::kill(child.pid, e.signal);
      });
      if (Status s = step.wait(drain_deadline); !s.ok()) {
        // Cannot happen with valid descriptors; if it does, do not report a guess.
        say(prefix, s.message());
        if (!exited) {
          ::kill(child.pid, SIGKILL);
          int status = 0;
          while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
          }
          result.signal = SIGKILL;
        }
        break;
      }
      int status = 0;
      if (!exited && ::waitpid(child.pid, &status, WNOHANG) == child.pid) {
        exited = true;
        result.time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
        drain_deadline = Clock::now() + (stop_requested ? kShimDrainWhenStopped : kDrainAfterExit);
        if (WIFSIGNALED(status)) {
          result.signal = WTERMSIG(status);
        } else {
          result.exit_code = shell_status(status);
        }
      }
    }
    output.finish(to_stdout, to_stderr);
    end_descendants(stop_requested ? Clock::duration::zero() : kLeftoverTerm);
    if (stop_requested) linger = false;  // the job is already being stopped
  }

  write_all(2, format_exit_event(result, token) + "\n");
  if (result.failed() && linger) linger_until_stopped(signal_fd, options.linger_seconds);
  return result.status();
}

}  // namespace kolo::launcher
