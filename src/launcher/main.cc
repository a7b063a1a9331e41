// kolorun: the command line. Parses options, then either starts the workers itself
// (the default: the job's store, worker_plan.h, job.h), or with --mpi hands them to
// mpirun (mpirun_command.h, supervisor.h); --dry-run prints what either would run. Two
// hidden modes: the worker shim mpirun runs on every slot (shim.h), and the wrapper ssh
// runs for a worker on another host (remote_worker.h).
//
// Not for: anything that needs testing without a process: that lives in hosts.h,
// layout.h, mpirun_command.h and worker_plan.h.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "launcher/elastic_args.h"
#include "launcher/elastic_driver.h"
#include "launcher/events.h"
#include "launcher/hosts.h"
#include "launcher/job.h"
#include "launcher/kolorun_env.h"
#include "launcher/layout.h"
#include "launcher/lines.h"
#include "launcher/mpirun_command.h"
#include "launcher/own_launch.h"
#include "launcher/ps_plan.h"
#include "launcher/remote_worker.h"
#include "launcher/shim.h"
#include "launcher/supervisor.h"
#include "launcher/threads.h"
#include "launcher/worker_plan.h"
#include "startup/config.h"

namespace {

using kolo::Status;
namespace launcher = kolo::launcher;
using launcher::OwnLaunch;
using launcher::run_elastic_main;
using launcher::run_own;
using launcher::self_exe;
using launcher::this_host_names;

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
       "failed worker's status. See docs/launcher.md.\n"
       "\nParameter-server jobs (--ps N -np M [--evaluator]) start a chief, M workers, N ps\n"
       "tasks (and an evaluator), packed over the slots in that order, each with a\n"
       "TF_CONFIG (ports free on this host; on other hosts a random base from 20000 up),\n"
       "KOLO_TASK_TYPE, KOLO_TASK_INDEX, KOLO_RENDEZVOUS_ADDR, KOLO_RENDEZVOUS_SECRET,\n"
       "KOLO_HOST_ADDR and KOLO_LOCAL_SIZE (the job's tasks on that host), and no KOLO_RANK\n"
       "or KOLO_SIZE. Output is prefixed \"[worker:1] \". A failed worker, ps or evaluator\n"
       "is named and published (launcher/exit/<rank>, launcher/task_exit/<type>:<index>) and\n"
       "the job goes on (--max-restarts restarts failed workers); when the chief ends, the\n"
       "others are stopped and kolorun exits with the chief's status.\n";
  s += "\nkolorun's own settings, from its environment:\n";
  for (const auto& v : launcher::kolorun_settings()) {
    s += "  " + std::string(v.name) + " (default: " + v.default_value + ")\n      " + v.doc + "\n";
  }
  return s;
}

class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "\nUsage: kolorun -np N [-H HOST:SLOTS,... | --hostfile FILE] [OPTIONS] [--] PROGRAM "
           "[ARGS...]\n"
           "       kolorun --ps N -np M [--evaluator] [--max-restarts R] [-H ... | --hostfile "
           "FILE] [OPTIONS] [--] PROGRAM [ARGS...]\n"
           "       kolorun --min-np MIN [--max-np MAX] [-np N] [-H ... | --hostfile FILE | "
           "--host-discovery-script SCRIPT] [OPTIONS] [--] PROGRAM [ARGS...]\n";
  }
};

int fail(const std::string& message) { return launcher::kolorun_error(message); }

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
  if (argc > 1 && std::string(argv[1]) == "--remote-worker") {
    return launcher::run_remote_worker({argv + 2, argv + argc});
  }

  // mpirun spells the worker count "-np"; CLI11 reads a single dash as one-letter flags.
  // Only kolorun's own options are rewritten: the walk stops at the program.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--" || a.empty() || a[0] != '-') break;
    if (a == "-np") a = "--np";
    if (a.rfind("-np=", 0) == 0) a = "-" + a;
    if (a == "-n" || a == "--np" || a == "-H" || a == "--hosts" || a == "--hostfile" ||
        a == "--grace-seconds" || a == "--rendezvous-addr" || a == "--ssh-port" ||
        a == "--ssh-identity-file" || a == "--ssh-config" || a == "--ps" || a == "--max-restarts" ||
        a == "--min-np" || a == "--max-np" || a == "--host-discovery-script" || a == "--slots" ||
        a == "--slots-per-host" || a == "--reset-limit" || a == "--elastic-timeout" ||
        a == "--discovery-interval") {
      ++i;  // the option's value
    }
    if (a == "--blacklist-cooldown-range") i += 2;
  }

  CLI::App app{"kolorun: run a kolo training program on N workers, on this host or several.",
               "kolorun"};
  app.formatter(std::make_shared<UsageFormatter>());
  app.prefix_command();  // everything from PROGRAM on belongs to the program
  app.footer(help_footer());
  app.get_formatter()->column_width(28);

  int np = 0, ps = -1, max_restarts = 0;
  bool evaluator = false;
  std::string host_list, hostfile, rendezvous_addr, ssh_identity_file, ssh_config;
  int ssh_port = 0;
  bool use_mpi = false, dry_run = false;
  double grace_seconds = 5;
  auto* np_opt = app.add_option("-n,--np", np,
                                "number of workers, also spelled -np (required, no default; >= 1)");
  auto* ps_opt = app.add_option(
      "--ps", ps,
      "start a parameter-server job: a chief, the -np workers and this many ps tasks, each "
      "with its TF_CONFIG (default: none, an allreduce job; >= 1)");
  app.add_flag("--evaluator", evaluator, "with --ps: also start one evaluator task (default: off)");
  app.add_option("--max-restarts", max_restarts,
                 "with --ps: how many times in all kolorun restarts each failed worker task, "
                 "with the same TF_CONFIG (default: 0)")
      ->type_name("R");
  auto* hosts_opt = app.add_option(
      "-H,--hosts", host_list,
      "hosts and slots, e.g. a:4,b:4 (default: all workers on this host); ranks fill the "
      "first host's slots first");
  app.add_option("--hostfile", hostfile,
                 "file with one 'HOST slots=N' per line (# comments) instead of -H "
                 "(default: none)")
      ->excludes(hosts_opt);
  app.add_flag("--mpi", use_mpi,
               "start the workers through OpenMPI's mpirun instead of by kolorun itself "
               "(default: off; KOLO_LAUNCHER_MODE=mpi does the same)");
  app.add_option("--rendezvous-addr", rendezvous_addr,
                 "the address of this host that workers on other hosts reach the job's store "
                 "at (default: this host's name in -H, else the address of the interface "
                 "towards the first other host)")
      ->type_name("ADDR");
  app.add_option("--ssh-port", ssh_port,
                 "the port ssh connects to on other hosts (default: KOLO_SSH_PORT, else ssh's "
                 "own)")
      ->check(CLI::Range(1, 65535))
      ->type_name("PORT");
  app.add_option("--ssh-identity-file", ssh_identity_file,
                 "the private key ssh uses for other hosts (ssh -i; default: ssh's own)")
      ->type_name("FILE");
  app.add_option("--ssh-config", ssh_config,
                 "the ssh client configuration file for other hosts (ssh -F; default: ssh's "
                 "own)")
      ->type_name("FILE");
  app.add_option("--grace-seconds", grace_seconds,
                 "after the first worker fails, how long the others get to finish or report "
                 "their own errors before they are stopped (default: 5)")
      ->type_name("SECONDS");
  // Elastic jobs (docs/launcher.md, "Elastic jobs"; elastic_driver.h).
  int min_np = 0, max_np = 0, slots = 1, reset_limit = -1;
  std::string discovery_script;
  std::vector<double> cooldown;
  double elastic_timeout = 600, discovery_interval = 1;
  auto* min_opt = app.add_option("--min-np", min_np,
                                 "an elastic job: the fewest workers it trains with; it waits "
                                 "(--elastic-timeout) for that many slots (default: -np; >= 1)")
                      ->type_name("MIN");
  auto* max_opt = app.add_option("--max-np", max_np,
                                 "an elastic job: the most workers it runs (default: as many as "
                                 "there are slots)")
                      ->type_name("MAX");
  auto* script_opt = app.add_option(
      "--host-discovery-script", discovery_script,
      "an elastic job: a command (run with sh -c every --discovery-interval) that prints the "
      "usable hosts, one HOST[:SLOTS] per line (default: none, the hosts of -H/--hostfile are "
      "fixed)");
  script_opt->type_name("SCRIPT");
  auto* slots_opt = app.add_option("--slots,--slots-per-host", slots,
                                   "an elastic job: the slots of a discovered host that prints "
                                   "no :SLOTS (default: 1)")
                        ->type_name("N");
  auto* reset_opt = app.add_option("--reset-limit", reset_limit,
                                   "an elastic job: the most resets (new generations after the "
                                   "first); one more ends the job (default: no limit)")
                        ->type_name("R");
  auto* cooldown_opt =
      app.add_option("--blacklist-cooldown-range", cooldown,
                     "an elastic job: a host where a worker failed gets new workers again after "
                     "LO*2^n + U(0,1)*LO seconds (its n-th failure), at least LO, at most HI "
                     "(default: blacklisted for good)")
          ->expected(2)
          ->allow_extra_args(false)
          ->type_name("LO HI");
  auto* timeout_opt = app.add_option("--elastic-timeout", elastic_timeout,
                                     "an elastic job: how long it waits for --min-np slots "
                                     "before it ends with an error; also the workers' "
                                     "KOLO_ELASTIC_TIMEOUT_SECONDS (default: 600, or "
                                     "KOLO_ELASTIC_TIMEOUT_SECONDS)")
                          ->type_name("SECONDS");
  auto* interval_opt = app.add_option("--discovery-interval", discovery_interval,
                                      "an elastic job: seconds between runs of the discovery "
                                      "script (default: 1)")
                           ->type_name("SECONDS");
  app.add_flag("--dry-run", dry_run,
               "print what would run (each worker's command, or the mpirun command), and exit "
               "(default: off)");

  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes (106 for a missing option, ...) look like a worker's status;
    // usage errors are 2, as for other command-line tools.
    return app.exit(e) == 0 ? 0 : 2;
  }

  // On a terminal the workers' progress bars redraw in place and kolorun shows their
  // updates as they come (docs/launcher.md, "Output"): every worker gets KOLO_TERMINAL=1
  // (kolorun's environment is the local workers'; KOLO_* variables reach other hosts on
  // the ssh command line, and mpirun's workers through -x). Otherwise KOLO_TERMINAL=0: a
  // worker's stdout is a pseudo-terminal either way (for line buffering), so isatty()
  // there says nothing about where its lines end up.
  launcher::KolorunEnv settings;
  if (Status s = launcher::read_kolorun_env(kolo::core::process_env(), &settings); !s.ok()) {
    return fail(s.message());
  }
  ::setenv(launcher::kTerminalVar, settings.terminal ? "1" : "0", 1);
  // What kolorun's own launcher needs of the flags (elastic or not).
  const auto own_launch = [&] {
    OwnLaunch own;
    own.dry_run = dry_run;
    own.rendezvous_addr = rendezvous_addr;
    own.ssh_port = ssh_port > 0 ? ssh_port : settings.ssh_port;
    own.ssh_identity_file = ssh_identity_file;
    own.ssh_config = ssh_config;
    return own;
  };
  const bool elastic = min_opt->count() + max_opt->count() + script_opt->count() > 0;
  if (!elastic) {
    for (auto* opt : {slots_opt, reset_opt, cooldown_opt, timeout_opt, interval_opt}) {
      if (opt->count() == 0) continue;
      return fail(opt->get_name() +
                  " belongs to an elastic job: add --min-np, --max-np or "
                  "--host-discovery-script (see docs/launcher.md, \"Elastic jobs\")");
    }
  }
  if (elastic) {
    if (ps_opt->count() > 0) {
      return fail(
          "--ps is not elastic: an elastic job (--min-np, --max-np, "
          "--host-discovery-script) is an allreduce job");
    }
    if (use_mpi || settings.mpi) {
      return fail(std::string("elastic jobs run on kolorun's own launcher and Gloo; ") +
                  (use_mpi ? "--mpi" : "KOLO_LAUNCHER_MODE=mpi") + " is not elastic");
    }
    launcher::ElasticArgs args{
        np_opt->count() > 0 ? np : 0, min_np, max_np, discovery_script, slots, reset_limit,
        cooldown, elastic_timeout, discovery_interval, host_list, hosts_opt->count() > 0, hostfile,
        grace_seconds, app.remaining(),
        // The workers' variable is --elastic-timeout's default
        // (checked with it).
        timeout_opt->count() == 0 ? settings.elastic_timeout : std::string()};
    return run_elastic_main(args, own_launch());
  }
  if (ps_opt->count() == 0 && np_opt->count() == 0) {
    return fail("-np N is required: the number of workers (run kolorun --help for usage)");
  }
  if (ps_opt->count() == 0 && (evaluator || max_restarts != 0)) {
    return fail(std::string(evaluator ? "--evaluator" : "--max-restarts") +
                " belongs to a parameter-server job: add --ps N (an allreduce job ends at "
                "its first failure; see docs/launcher.md)");
  }
  launcher::LaunchRequest request;
  request.np = np;
  if (ps_opt->count() > 0) request.ps = ps;
  request.evaluator = evaluator;
  request.max_restarts = max_restarts;
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
  if (Status s = request.parameter_server() ? launcher::validate_ps_job(request)
                                            : launcher::validate(request);
      !s.ok()) {
    return fail(s.message());
  }
  // What runs: every task of a ps job, for the limits and the threads below.
  launcher::LaunchRequest processes = request;
  if (request.parameter_server()) processes.np = launcher::ps_task_count(request);
  // The limits' message names what starts the workers: mpirun, or kolorun itself.
  if (Status s = launcher::check_machine_limits(processes, machine_limits(), this_host_names(),
                                                use_mpi || settings.mpi ? "mpirun" : "kolorun");
      !s.ok()) {
    return fail(s.message());
  }
  if (request.parameter_server() && (use_mpi || settings.mpi)) {
    return fail(std::string("--ps runs through kolorun's own launcher, not ") +
                (use_mpi ? "--mpi" : "KOLO_LAUNCHER_MODE=mpi") +
                ": leave that out (a parameter-server job does not use MPI)");
  }
  if (!use_mpi && !settings.mpi) {
    launcher::prepare_worker_threads(processes, kolo::core::process_env(), this_host_names(),
                                     /*announce=*/!dry_run);
    return run_own(request, own_launch());
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
  supervise.terminal = launcher::is_terminal(inputs.env, 1);
  return launcher::supervise(supervise);
}
