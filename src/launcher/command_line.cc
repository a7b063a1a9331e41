// kolorun's command line (see command_line.h).
#include "launcher/command_line.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>

#include "launcher/kolorun_env.h"
#include "startup/config.h"

namespace kolo::launcher {
namespace {

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
  for (const auto& v : kolorun_settings()) {
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

}  // namespace

CommandLine parse_command_line(int argc, char** argv) {
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

  CommandLine cl;
  int np = 0, ps = -1;  // copied into cl once parsed, when given
  std::string host_list;
  ElasticArgs& e = cl.elastic;
  auto* np_opt = app.add_option("-n,--np", np,
                                "number of workers, also spelled -np (required, no default; >= 1)");
  auto* ps_opt = app.add_option(
      "--ps", ps,
      "start a parameter-server job: a chief, the -np workers and this many ps tasks, each "
      "with its TF_CONFIG (default: none, an allreduce job; >= 1)");
  app.add_flag("--evaluator", cl.evaluator,
               "with --ps: also start one evaluator task (default: off)");
  app.add_option("--max-restarts", cl.max_restarts,
                 "with --ps: how many times in all kolorun restarts each failed worker task, "
                 "with the same TF_CONFIG (default: 0)")
      ->type_name("R");
  auto* hosts_opt = app.add_option(
      "-H,--hosts", host_list,
      "hosts and slots, e.g. a:4,b:4 (default: all workers on this host); ranks fill the "
      "first host's slots first");
  app.add_option("--hostfile", cl.hostfile,
                 "file with one 'HOST slots=N' per line (# comments) instead of -H "
                 "(default: none)")
      ->excludes(hosts_opt);
  app.add_flag("--mpi", cl.mpi,
               "start the workers through OpenMPI's mpirun instead of by kolorun itself "
               "(default: off; KOLO_LAUNCHER_MODE=mpi does the same)");
  app.add_option("--rendezvous-addr", cl.rendezvous_addr,
                 "the address of this host that workers on other hosts reach the job's store "
                 "at (default: this host's name in -H, else the address of the interface "
                 "towards the first other host)")
      ->type_name("ADDR");
  app.add_option("--ssh-port", cl.ssh_port,
                 "the port ssh connects to on other hosts (default: KOLO_SSH_PORT, else ssh's "
                 "own)")
      ->check(CLI::Range(1, 65535))
      ->type_name("PORT");
  app.add_option("--ssh-identity-file", cl.ssh_identity_file,
                 "the private key ssh uses for other hosts (ssh -i; default: ssh's own)")
      ->type_name("FILE");
  app.add_option("--ssh-config", cl.ssh_config,
                 "the ssh client configuration file for other hosts (ssh -F; default: ssh's "
                 "own)")
      ->type_name("FILE");
  app.add_option("--grace-seconds", cl.grace_seconds,
                 "after the first worker fails, how long the others get to finish or report "
                 "their own errors before they are stopped (default: 5)")
      ->type_name("SECONDS");
  // Elastic jobs (docs/launcher.md, "Elastic jobs"; elastic_driver.h).
  auto* min_opt = app.add_option("--min-np", e.min_np,
                                 "an elastic job: the fewest workers it trains with; it waits "
                                 "(--elastic-timeout) for that many slots (default: -np; >= 1)")
                      ->type_name("MIN");
  auto* max_opt = app.add_option("--max-np", e.max_np,
                                 "an elastic job: the most workers it runs (default: as many as "
                                 "there are slots)")
                      ->type_name("MAX");
  auto* script_opt = app.add_option(
      "--host-discovery-script", e.discovery_script,
      "an elastic job: a command (run with sh -c every --discovery-interval) that prints the "
      "usable hosts, one HOST[:SLOTS] per line (default: none, the hosts of -H/--hostfile are "
      "fixed)");
  script_opt->type_name("SCRIPT");
  auto* slots_opt = app.add_option("--slots,--slots-per-host", e.slots,
                                   "an elastic job: the slots of a discovered host that prints "
                                   "no :SLOTS (default: 1)")
                        ->type_name("N");
  auto* reset_opt = app.add_option("--reset-limit", e.reset_limit,
                                   "an elastic job: the most resets (new generations after the "
                                   "first); one more ends the job (default: no limit)")
                        ->type_name("R");
  auto* cooldown_opt =
      app.add_option("--blacklist-cooldown-range", e.cooldown,
                     "an elastic job: a host where a worker failed gets new workers again after "
                     "LO*2^n + U(0,1)*LO seconds (its n-th failure), at least LO, at most HI "
                     "(default: blacklisted for good)")
          ->expected(2)
          ->allow_extra_args(false)
          ->type_name("LO HI");
  auto* timeout_opt = app.add_option("--elastic-timeout", e.elastic_timeout,
                                     "an elastic job: how long it waits for --min-np slots "
                                     "before it ends with an error; also the workers' "
                                     "KOLO_ELASTIC_TIMEOUT_SECONDS (default: 600, or "
                                     "KOLO_ELASTIC_TIMEOUT_SECONDS)")
                          ->type_name("SECONDS");
  auto* interval_opt = app.add_option("--discovery-interval", e.discovery_interval,
                                      "an elastic job: seconds between runs of the discovery "
                                      "script (default: 1)")
                           ->type_name("SECONDS");
  app.add_flag("--dry-run", cl.dry_run,
               "print what would run (each worker's command, or the mpirun command), and exit "
               "(default: off)");

  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& error) {
    // CLI11's own codes (106 for a missing option, ...) look like a worker's status;
    // usage errors are 2, as for other command-line tools.
    cl.exit_status = app.exit(error) == 0 ? 0 : 2;
    return cl;
  }

  if (np_opt->count() > 0) cl.np = np;
  if (ps_opt->count() > 0) cl.ps = ps;
  if (hosts_opt->count() > 0) cl.hosts = host_list;
  cl.rest = app.remaining();
  cl.is_elastic = min_opt->count() + max_opt->count() + script_opt->count() > 0;
  cl.elastic_timeout_given = timeout_opt->count() > 0;
  if (!cl.is_elastic) {
    for (auto* opt : {slots_opt, reset_opt, cooldown_opt, timeout_opt, interval_opt}) {
      if (opt->count() == 0) continue;
      cl.elastic_only_option = opt->get_name();
      break;
    }
  }
  e.np = cl.np.value_or(0);
  e.host_list = host_list;
  e.hosts_given = cl.hosts.has_value();
  e.hostfile = cl.hostfile;
  e.grace_seconds = cl.grace_seconds;
  e.program = cl.rest;
  return cl;
}

}  // namespace kolo::launcher
