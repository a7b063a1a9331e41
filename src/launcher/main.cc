// kolorun: the command line. Parses options, then either prints the mpirun command
// (--dry-run), supervises the job (supervisor.h), or acts as a worker shim (shim.h,
// the hidden mode mpirun runs on every slot).
//
// Not for: anything that needs testing without a process: that lives in hosts.h,
// layout.h and mpirun_command.h.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "core/config.h"
#include "launcher/events.h"
#include "launcher/hosts.h"
#include "launcher/layout.h"
#include "launcher/mpirun_command.h"
#include "launcher/shim.h"
#include "launcher/supervisor.h"
#include "launcher/threads.h"

namespace {

using kolo::Status;
namespace launcher = kolo::launcher;

std::string help_footer() {
  std::string s;
  s += "\nEach worker gets these variables:\n";
  for (const auto& v : kolo::core::launcher_variables()) {
    s += "  " + std::string(v.name) + " (default: " + v.default_value + ")\n      " + v.doc + "\n";
  }
  s += "\nRuntime options, read by every worker from the environment (kolorun passes\n"
       "KOLO_* variables on to all hosts):\n";
  for (const auto& v : kolo::core::config_options()) {
    const std::string value = *v.default_value ? v.default_value : "unset";
    s += "  " + std::string(v.name) + " (default: " + value + ")\n      " + v.doc + "\n";
    if (*v.accepts) s += "      values: " + std::string(v.accepts) + "\n";
  }
  s += "\nWorker output is prefixed with \"[rank] \". When a worker fails, the others get\n"
       "--grace-seconds to finish or report their own errors (e.g. a peer timeout,\n"
       "KOLO_PEER_TIMEOUT_SECONDS) before the job is stopped; kolorun then exits with the\n"
       "failed worker's status. See docs/launcher.md.\n";
  return s;
}

class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "\nUsage: kolorun -np N [-H HOST:SLOTS,... | --hostfile FILE] [OPTIONS] [--] PROGRAM "
           "[ARGS...]\n";
  }
};

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "kolorun";
  return std::string(buf, static_cast<size_t>(n));
}

int fail(const std::string& message) {
  std::cerr << "kolorun: " << message << "\n";
  return 2;
}

launcher::MachineLimits machine_limits() {
  launcher::MachineLimits limits;
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    limits.open_files = static_cast<long>(rl.rlim_cur);
    if (rl.rlim_max != RLIM_INFINITY) limits.open_files_hard = static_cast<long>(rl.rlim_max);
  }
  // The kernel does not hold root to RLIMIT_NPROC.
  if (::geteuid() != 0 && ::getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    limits.processes = static_cast<long>(rl.rlim_cur);
  }
  return limits;
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
  return names;
}

int run_worker_shim(int argc, char** argv) {
  launcher::ShimOptions options;
  if (Status s = launcher::parse_shim_args({argv + 1, argv + argc}, &options); !s.ok()) {
    return fail(s.message());
  }
  return launcher::run_shim(options);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--worker-shim") return run_worker_shim(argc, argv);

  // mpirun spells the worker count "-np"; CLI11 reads a single dash as one-letter flags.
  // Only kolorun's own options are rewritten: the walk stops at the program.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--" || a.empty() || a[0] != '-') break;
    if (a == "-np") a = "--np";
    if (a.rfind("-np=", 0) == 0) a = "-" + a;
    if (a == "-n" || a == "--np" || a == "-H" || a == "--hosts" || a == "--hostfile" ||
        a == "--grace-seconds") {
      ++i;  // the option's value
    }
  }

  CLI::App app{"kolorun: run a kolo training program on N workers, on this host or several.",
               "kolorun"};
  app.formatter(std::make_shared<UsageFormatter>());
  app.prefix_command();  // everything from PROGRAM on belongs to the program
  app.footer(help_footer());
  app.get_formatter()->column_width(28);

  int np = 0;
  std::string host_list, hostfile;
  bool use_mpi = false, dry_run = false;
  double grace_seconds = 5;
  app.add_option("-n,--np", np, "number of workers, also spelled -np (required, no default; >= 1)")
      ->required();
  auto* hosts_opt = app.add_option(
      "-H,--hosts", host_list,
      "hosts and slots, e.g. a:4,b:4 (default: all workers on this host); ranks fill the "
      "first host's slots first");
  app.add_option("--hostfile", hostfile,
                 "file with one 'HOST slots=N' per line (# comments) instead of -H "
                 "(default: none)")
      ->excludes(hosts_opt);
  app.add_flag("--mpi", use_mpi,
               "start the workers through mpirun (OpenMPI) (default: on; in this version the "
               "only way)");
  app.add_option("--grace-seconds", grace_seconds,
                 "after the first worker fails, how long the others get to finish or report "
                 "their own errors before they are stopped (default: 5)")
      ->type_name("SECONDS");
  app.add_flag("--dry-run", dry_run,
               "print the mpirun command that would run, and exit (default: off)");

  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes (106 for a missing option, ...) look like a worker's status;
    // usage errors are 2, as for other command-line tools.
    return app.exit(e) == 0 ? 0 : 2;
  }

  launcher::LaunchRequest request;
  request.np = np;
  request.grace_seconds = grace_seconds;
  request.program = app.remaining();
  if (!request.program.empty() && request.program.front() == "--") {
    request.program.erase(request.program.begin());
  }
  if (hosts_opt->count() > 0) {
    // Given but empty ("-H $HOSTS" with HOSTS unset) is an error, not "this host".
    if (Status s = launcher::parse_host_list(host_list, &request.hosts); !s.ok()) {
      return fail("-H: " + s.message());
    }
    request.hosts_source = "-H " + host_list;
  } else if (!hostfile.empty()) {
    if (Status s = launcher::read_hostfile(hostfile, &request.hosts); !s.ok()) {
      return fail(s.message());
    }
    request.hosts_source = "hostfile " + hostfile;
  }
  if (Status s = launcher::validate(request); !s.ok()) return fail(s.message());
  if (Status s = launcher::check_machine_limits(request, machine_limits(), this_host_names());
      !s.ok()) {
    return fail(s.message());
  }

  // The shims mark their exit reports with this job's token (exported with the other
  // KOLO_* variables; the shim removes it from the program's environment).
  const std::string token = launcher::make_event_token();
  ::setenv(launcher::kTokenVar, token.c_str(), 1);
  launcher::prepare_worker_threads(request, kolo::core::process_env(), this_host_names(),
                                   /*announce=*/!dry_run);
  launcher::MpirunInputs inputs;
  inputs.as_root = ::geteuid() == 0;
  inputs.self_exe = self_exe();
  inputs.env = kolo::core::process_env();
  inputs.this_host_names = this_host_names();
  // OpenMPI's shared-memory segments go to a directory of this job's own (removed at the
  // end, even if mpirun is killed), unless the user chose a place; not for a dry run,
  // which starts nothing.
  if (!dry_run && launcher::runs_on_this_host_only(request, this_host_names()) &&
      inputs.env.count("OMPI_MCA_btl_vader_backing_directory") == 0) {
    char dir[] = "/dev/shm/kolo.XXXXXX";
    if (::mkdtemp(dir) != nullptr) inputs.shm_dir = dir;  // mode 0700
  }
  const std::vector<std::string> command = launcher::mpirun_argv(request, inputs);
  if (dry_run) {
    std::cout << launcher::shell_join(command) << std::endl;
    return 0;
  }

  launcher::SuperviseOptions supervise;
  supervise.mpirun_argv = command;
  supervise.np = np;
  supervise.grace_seconds = grace_seconds;
  supervise.event_token = token;
  supervise.shm_dir = inputs.shm_dir;
  return launcher::supervise(supervise);
}
