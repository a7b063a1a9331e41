// kolorun: the entry point. Takes the two hidden modes first (the worker shim mpirun runs
// on every slot, shim.h; the wrapper ssh runs for a worker on another host,
// remote_worker.h), then parses the command line (command_line.h) and kolorun's own
// settings (kolorun_env.h) and dispatches: an elastic job (elastic_args.h), kolorun's own
// launcher (own_launch.h, job.h), or with --mpi mpirun (mpirun_command.h, supervisor.h);
// --dry-run prints what either would run.
//
// Not for: anything that needs testing without a process: that lives in hosts.h,
// layout.h, mpirun_command.h and worker_plan.h.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "launcher/command_line.h"
#include "launcher/elastic_args.h"
#include "launcher/events.h"
#include "launcher/hosts.h"
#include "launcher/kolorun_env.h"
#include "launcher/lines.h"
#include "launcher/mpirun_command.h"
#include "launcher/own_launch.h"
#include "launcher/ps_plan.h"
#include "launcher/remote_worker.h"
#include "launcher/shim.h"
#include "launcher/supervisor.h"
#include "launcher/threads.h"
#include "startup/config.h"

namespace {

using kolo::Status;
namespace launcher = kolo::launcher;
using launcher::CommandLine;
using launcher::KolorunEnv;
using launcher::LaunchRequest;
using launcher::self_exe;
using launcher::this_host_names;

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

// What kolorun's own launcher needs of the flags (elastic or not).
launcher::OwnLaunch own_launch(const CommandLine& cl, const KolorunEnv& settings) {
  launcher::OwnLaunch own;
  own.dry_run = cl.dry_run;
  own.rendezvous_addr = cl.rendezvous_addr;
  own.ssh_port = cl.ssh_port > 0 ? cl.ssh_port : settings.ssh_port;
  own.ssh_identity_file = cl.ssh_identity_file;
  own.ssh_config = cl.ssh_config;
  return own;
}

int run_elastic(const CommandLine& cl, const KolorunEnv& settings) {
  if (cl.ps) {
    return fail(
        "--ps is not elastic: an elastic job (--min-np, --max-np, "
        "--host-discovery-script) is an allreduce job");
  }
  if (cl.mpi || settings.mpi) {
    return fail(std::string("elastic jobs run on kolorun's own launcher and Gloo; ") +
                (cl.mpi ? "--mpi" : "KOLO_LAUNCHER_MODE=mpi") + " is not elastic");
  }
  launcher::ElasticArgs args = cl.elastic;
  // The workers' variable is --elastic-timeout's default (checked with it).
  if (!cl.elastic_timeout_given) args.elastic_timeout_env = settings.elastic_timeout;
  return launcher::run_elastic_main(args, own_launch(cl, settings));
}

// The request of a job that is not elastic, checked; the message is kolorun's error.
Status request_from(const CommandLine& cl, LaunchRequest* request) {
  if (!cl.ps && !cl.np) {
    return kolo::InvalidArgument(
        "-np N is required: the number of workers (run kolorun --help for usage)");
  }
  if (!cl.ps && (cl.evaluator || cl.max_restarts != 0)) {
    return kolo::InvalidArgument(std::string(cl.evaluator ? "--evaluator" : "--max-restarts") +
                                 " belongs to a parameter-server job: add --ps N (an allreduce "
                                 "job ends at its first failure; see docs/launcher.md)");
  }
  request->np = cl.np.value_or(0);
  if (cl.ps) request->ps = *cl.ps;
  request->evaluator = cl.evaluator;
  request->max_restarts = cl.max_restarts;
  request->grace_seconds = cl.grace_seconds;
  request->program = cl.rest;
  if (!request->program.empty() && request->program.front() == "--") {
    request->program.erase(request->program.begin());
  }
  if (cl.hosts) {
    // Given but empty ("-H $HOSTS" with HOSTS unset) is an error, not "this host".
    if (Status s = launcher::parse_host_list(*cl.hosts, &request->hosts); !s.ok()) {
      return kolo::InvalidArgument("-H: " + s.message());
    }
    request->hosts_source = "-H " + *cl.hosts;
  } else if (!cl.hostfile.empty()) {
    KOLO_RETURN_IF_ERROR(launcher::read_hostfile(cl.hostfile, &request->hosts));
    request->hosts_source = "hostfile " + cl.hostfile;
  }
  return request->parameter_server() ? launcher::validate_ps_job(*request)
                                     : launcher::validate(*request);
}

// The --mpi path (or KOLO_LAUNCHER_MODE=mpi): mpirun starts a shim on every slot.
int run_mpi(const LaunchRequest& request, const CommandLine& cl) {
  const bool dry_run = cl.dry_run;
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
  supervise.np = request.np;
  supervise.grace_seconds = request.grace_seconds;
  supervise.event_token = token;
  supervise.shm_dir = inputs.shm_dir;
  supervise.terminal = launcher::is_terminal(inputs.env, 1);
  return launcher::supervise(supervise);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--worker-shim") return run_worker_shim(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "--remote-worker") {
    return launcher::run_remote_worker({argv + 2, argv + argc});
  }
  const CommandLine cl = launcher::parse_command_line(argc, argv);
  if (cl.exit_status) return *cl.exit_status;

  // On a terminal the workers' progress bars redraw in place and kolorun shows their
  // updates as they come (docs/launcher.md, "Output"): every worker gets KOLO_TERMINAL=1
  // (kolorun's environment is the local workers'; KOLO_* variables reach other hosts on
  // the ssh command line, and mpirun's workers through -x). Otherwise KOLO_TERMINAL=0: a
  // worker's stdout is a pseudo-terminal either way (for line buffering), so isatty()
  // there says nothing about where its lines end up.
  KolorunEnv settings;
  if (Status s = launcher::read_kolorun_env(kolo::core::process_env(), &settings); !s.ok()) {
    return fail(s.message());
  }
  ::setenv(launcher::kTerminalVar, settings.terminal ? "1" : "0", 1);
  if (cl.is_elastic) return run_elastic(cl, settings);
  if (!cl.elastic_only_option.empty()) {
    return fail(cl.elastic_only_option +
                " belongs to an elastic job: add --min-np, --max-np or "
                "--host-discovery-script (see docs/launcher.md, \"Elastic jobs\")");
  }
  LaunchRequest request;
  if (Status s = request_from(cl, &request); !s.ok()) return fail(s.message());
  const bool mpi = cl.mpi || settings.mpi;
  // What runs: every task of a ps job, for the limits and the threads below.
  LaunchRequest processes = request;
  if (request.parameter_server()) processes.np = launcher::ps_task_count(request);
  // The limits' message names what starts the workers: mpirun, or kolorun itself.
  if (Status s = launcher::check_machine_limits(processes, machine_limits(), this_host_names(),
                                                mpi ? "mpirun" : "kolorun");
      !s.ok()) {
    return fail(s.message());
  }
  if (request.parameter_server() && mpi) {
    return fail(std::string("--ps runs through kolorun's own launcher, not ") +
                (cl.mpi ? "--mpi" : "KOLO_LAUNCHER_MODE=mpi") +
                ": leave that out (a parameter-server job does not use MPI)");
  }
  if (mpi) return run_mpi(request, cl);
  launcher::prepare_worker_threads(processes, kolo::core::process_env(), this_host_names(),
                                   /*announce=*/!cl.dry_run);
  return launcher::run_own(request, own_launch(cl, settings));
}
