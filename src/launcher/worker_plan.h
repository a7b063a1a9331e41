// WorkerPlan: what kolorun's own launcher runs for each worker, and with which
// environment: the program itself on this host, or `ssh HOST 'cd CWD && exec env K=V ...
// kolorun --remote-worker -- PROGRAM ARGS'` for another host.
//
// Pure (kolorun's environment, its path, its working directory and the rendezvous
// address are inputs), so that the variables and the ssh command, quoting included, are
// unit-tested without starting anything. Not for: starting or watching the workers
// (job.h), the --mpi path (mpirun_command.h), the remote side (remote_worker.h).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/layout.h"
#include "launcher/mpirun_command.h"

namespace kolo::launcher {

// What kolorun gives each worker beyond the rank variables (docs/launcher.md).
inline constexpr const char* kRendezvousAddrVar = "KOLO_RENDEZVOUS_ADDR";
inline constexpr const char* kRendezvousSecretVar = "KOLO_RENDEZVOUS_SECRET";
inline constexpr const char* kHostAddrVar = "KOLO_HOST_ADDR";

struct PlanInputs {
  std::map<std::string, std::string> env;    // kolorun's environment
  std::vector<std::string> this_host_names;  // is_this_host
  std::string self_exe;                      // kolorun's absolute path (same on every host)
  std::string cwd;                           // the workers' working directory
  // "host:port" of the job's store, as every worker can reach it.
  std::string rendezvous_addr;
  // The address this host's workers bind to in a multi-host job (the host part of
  // rendezvous_addr, usually); a one-host job uses 127.0.0.1.
  std::string this_host_addr = "127.0.0.1";
  int ssh_port = 0;  // 0: ssh's default (or its config)
  // More ssh arguments before the host (--ssh-identity-file, --ssh-config): "-i", F, ...
  std::vector<std::string> ssh_options;
  int cores = 1;  // this host's usable cores, for OMP_NUM_THREADS (threads.h)
};

struct WorkerPlan {
  int rank = 0;
  std::string host;  // as the host list names it; "localhost" for a one-host job
  bool remote = false;
  // What kolorun executes: the program, or ssh.
  std::vector<std::string> argv;
  // Variables set for the worker (not secrets). Local: on top of kolorun's environment.
  // Remote: already on the command line in argv; kept here for --dry-run and tests.
  std::map<std::string, std::string> vars;
  // A parameter-server job's task (ps_plan.h): "chief", "worker", "ps" or "evaluator"
  // and its index; "" for a worker of an allreduce job.
  std::string task_type;
  int task_index = 0;
};

// How kolorun names a worker: its output prefix without brackets ("3"; "worker:1" for a
// ps job's task) and in messages ("rank 3"; "worker 1").
std::string worker_label(const WorkerPlan& p);
std::string worker_name(const WorkerPlan& p);

// One plan per rank, in rank order. Requires validate(request) to pass.
std::vector<WorkerPlan> plan_workers(const LaunchRequest& request, const PlanInputs& in);

// One worker's plan: `program` on `host` (`remote`: through ssh and the wrapper) with the
// rank variables of `ranks`, then `vars`, then the job's own (store address, host address,
// OMP_NUM_THREADS for a local one). plan_workers and the elastic driver build with it.
WorkerPlan plan_one_worker(const std::string& host, bool remote, const WorkerRanks& ranks,
                           const std::map<std::string, std::string>& vars,
                           const std::vector<std::string>& program, const PlanInputs& in);

// The command line the remote host's shell runs (the last argument of ssh):
// "cd CWD && exec env K=V ... SELF_EXE --remote-worker -- PROGRAM ARGS", every word
// quoted for a POSIX shell.
std::string remote_shell_command(const std::string& cwd,
                                 const std::map<std::string, std::string>& vars,
                                 const std::string& self_exe,
                                 const std::vector<std::string>& program);

// ssh's argv: ssh -o BatchMode=yes [-p PORT] [OPTIONS...] -- HOST COMMAND. No -tt: the
// remote side ends its worker when its stdin (a pipe from kolorun) closes
// (remote_worker.h).
std::vector<std::string> ssh_argv(const std::string& host, int port, const std::string& command,
                                  const std::vector<std::string>& options = {});

// What kolorun writes to a remote worker's stdin before anything else: the secrets,
// which must not appear on any command line (other users see argv in ps), one
// "NAME=VALUE\n" each, then an empty line. Names are KOLO_*; values hold no newline.
std::string secrets_header(const std::map<std::string, std::string>& secrets);
// Parses one header line (without its newline): NAME=VALUE with a KOLO_* name.
bool parse_secret_line(const std::string& line, std::string* name, std::string* value);

// The host the workers reach the store at, for a job with hosts other than this one:
// `override_addr` (--rendezvous-addr) if given; else the first name in the host list
// that names this host other than localhost/127.*; else nullopt (the caller asks the
// system for the address of the interface towards first_remote_host).
std::optional<std::string> rendezvous_host(const std::vector<HostSlots>& hosts,
                                           const std::vector<std::string>& this_host_names,
                                           const std::string& override_addr);
// The first host of the list that is one of this host's own network addresses, numeric
// and not loopback (127.*, ::1): for an elastic job whose discovery script may add hosts,
// the address they reach this host at. nullopt where the list names this host only as
// localhost, 127.* or a host name (which may resolve to a loopback address, as Debian's
// /etc/hosts does): such a job stays on this host unless --rendezvous-addr says otherwise.
std::optional<std::string> this_host_address(const std::vector<HostSlots>& hosts,
                                             const std::vector<std::string>& this_host_names);
// The first host of the list that is not this one ("" if none).
std::string first_remote_host(const std::vector<HostSlots>& hosts,
                              const std::vector<std::string>& this_host_names);

// "host:port" with brackets around an IPv6 address.
std::string host_port(const std::string& host, int port);

}  // namespace kolo::launcher
