// Building kolorun's mpirun command line (see mpirun_command.h).
#include "launcher/mpirun_command.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "launcher/layout.h"

namespace kolo::launcher {

Status validate(const LaunchRequest& r) {
  if (r.np < 1) return InvalidArgument("-np must be at least 1 (got " + std::to_string(r.np) + ")");
  if (r.program.empty() || r.program[0].empty()) {
    return InvalidArgument("no program given: usage is kolorun -np N PROGRAM [ARGS...]");
  }
  if (!r.hosts.empty()) {
    const int slots = total_slots(r.hosts);
    if (r.np > slots) {
      return InvalidArgument("-np " + std::to_string(r.np) + " needs " + std::to_string(r.np) +
                             " slots but " + r.hosts_source + " has " + std::to_string(slots) +
                             " (" + format_host_list(r.hosts) +
                             "); add hosts or slots, or lower -np");
    }
  }
  if (!(r.grace_seconds >= 0 && r.grace_seconds <= 86400)) {
    return InvalidArgument("--grace-seconds must be between 0 and 86400");
  }
  return Status::OK();
}

bool is_this_host(const std::string& host, const std::vector<std::string>& this_host_names) {
  if (host == "localhost" || host.rfind("127.", 0) == 0) return true;
  for (const auto& name : this_host_names) {
    if (host == name) return true;
  }
  return false;
}

bool runs_on_this_host_only(const LaunchRequest& r,
                            const std::vector<std::string>& this_host_names) {
  for (const auto& h : r.hosts) {
    if (!is_this_host(h.host, this_host_names)) return false;
  }
  return true;
}

Status check_machine_limits(const LaunchRequest& r, const MachineLimits& limits,
                            const std::vector<std::string>& this_host_names,
                            const std::string& starter) {
  const std::vector<int> per_host = fill_hosts(r.hosts, r.np);
  long here = 0;
  for (size_t i = 0; i < per_host.size(); ++i) {
    const std::string host = r.hosts.empty() ? "this host" : r.hosts[i].host;
    if (per_host[i] > kMaxWorkersPerHost) {
      return InvalidArgument("-np " + std::to_string(r.np) + " puts " +
                             std::to_string(per_host[i]) + " workers on " + host +
                             "; kolorun starts at most " + std::to_string(kMaxWorkersPerHost) +
                             " on one host: lower -np or add hosts");
    }
    if (r.hosts.empty() || is_this_host(host, this_host_names)) here += per_host[i];
  }
  if (here == 0) return Status::OK();
  const std::string workers = std::to_string(here) + " worker" + (here == 1 ? "" : "s");
  const long files = kMpirunFilesBase + kMpirunFilesPerWorker * here;
  if (limits.open_files > 0 && files > limits.open_files) {
    const long fit = std::max(0L, (limits.open_files - kMpirunFilesBase) / kMpirunFilesPerWorker);
    std::string raise = "raise it (ulimit -n " + std::to_string(files);
    if (limits.open_files_hard > 0 && limits.open_files_hard < files) {
      raise += "; the hard limit is " + std::to_string(limits.open_files_hard) +
               ", which only root can raise";
    }
    return InvalidArgument("-np " + std::to_string(r.np) + " starts " + workers +
                           " on this host, and " + starter + " needs about " +
                           std::to_string(files) +
                           " open files for them, but the open-file limit (ulimit -n) is " +
                           std::to_string(limits.open_files) + ", enough for " +
                           std::to_string(fit) + ": " + raise + ") or lower -np");
  }
  // Each worker is at least two processes (the shim and the program), plus mpirun's own.
  const long processes = 2 * here + 16;
  if (limits.processes > 0 && processes > limits.processes) {
    return InvalidArgument("-np " + std::to_string(r.np) + " starts " + workers +
                           " on this host, at least " + std::to_string(processes) +
                           " processes, but the process limit (ulimit -u) is " +
                           std::to_string(limits.processes) + ": raise it or lower -np");
  }
  return Status::OK();
}

double shim_linger_seconds(double grace_seconds) { return grace_seconds + 30; }

std::vector<std::string> exported_variables(const std::map<std::string, std::string>& env) {
  std::vector<std::string> names;
  for (const auto& [name, value] : env) {
    // The layout is set explicitly for this job; an inherited one would be stale.
    if (name == kHostSlotsVar) continue;
    if (name.rfind("KOLO_", 0) == 0 || name == "PATH" || name == "LD_LIBRARY_PATH") {
      names.push_back(name);
    }
  }
  return names;
}

std::vector<std::string> mpirun_argv(const LaunchRequest& r, const MpirunInputs& in) {
  std::vector<std::string> argv = {"mpirun"};
  if (in.as_root) argv.push_back("--allow-run-as-root");
  // Slot counts are checked by kolorun itself (validate); without this flag mpirun
  // would refuse to run more workers than it counts cores on this host.
  argv.push_back("--oversubscribe");
  argv.insert(argv.end(), {"-np", std::to_string(r.np)});
  if (!r.hosts.empty()) {
    // A hostfile is passed on as --host too, so that mpirun sees exactly the hosts and
    // slots kolorun parsed (and computed the layout from).
    argv.insert(argv.end(), {"--host", format_host_list(r.hosts)});
    // OpenMPI 4.1 cuts "node1.example.com" to "node1" before it runs ssh, unless told to
    // keep the names as the user wrote them.
    argv.insert(argv.end(), {"--mca", "orte_keep_fqdn_hostnames", "1"});
  }
  // Fill each host before the next: the order KOLO_HOST_SLOTS describes. Workers are
  // not pinned to cores; intra-op threads of libtorch would otherwise share one core.
  argv.insert(argv.end(), {"--map-by", "slot", "--bind-to", "none"});
  // Keep mpirun's default of ending the job when a process exits non-zero, even if the
  // site's MCA files turn it off: with it off, OpenMPI 4.1 mpirun never exits after a
  // process dies by a signal. The shim never exits non-zero before kolorun says so
  // (it lingers, see shim.h), so kolorun still decides when the others are stopped.
  argv.insert(argv.end(), {"--mca", "orte_abort_on_non_zero_status", "1"});
  if (runs_on_this_host_only(r, in.this_host_names)) {
    // A one-host job needs no network. Without this, every MPI process listens on
    // 0.0.0.0 and [::] (OpenMPI's TCP transport binds to any address whatever
    // btl_tcp_if_include says) and the libfabric one (btl ofi) on the host's address:
    // shared memory (vader) and self carry everything instead, under ob1 (UCX and the
    // libfabric MTL would bring their own listeners). mpirun's own out-of-band listener
    // still binds to any address (OpenMPI 4.1 has no setting for that); it is told to use
    // loopback for the connections it makes. A choice the user made in OMPI_MCA_* wins.
    if (in.env.count("OMPI_MCA_pml") == 0) argv.insert(argv.end(), {"--mca", "pml", "ob1"});
    if (in.env.count("OMPI_MCA_btl") == 0) {
      argv.insert(argv.end(), {"--mca", "btl", "self,vader"});
    }
    if (in.env.count("OMPI_MCA_oob_tcp_if_include") == 0) {
      argv.insert(argv.end(), {"--mca", "oob_tcp_if_include", "127.0.0.0/8"});
    }
  }
  if (!in.shm_dir.empty()) {
    // OpenMPI's shared-memory transport keeps one segment file per process
    // (vader_segment.<host>.<jobid>...). They are unlinked when the job ends normally but
    // left in /dev/shm when mpirun is killed; in a directory of this job's own kolorun
    // removes them whatever happened, and never touches another job's.
    argv.insert(argv.end(), {"--mca", "btl_vader_backing_directory", in.shm_dir});
  }
  for (const auto& name : exported_variables(in.env)) argv.insert(argv.end(), {"-x", name});
  argv.insert(argv.end(),
              {"-x", std::string(kHostSlotsVar) + "=" + format_layout(fill_hosts(r.hosts, r.np))});
  char linger[32];
  std::snprintf(linger, sizeof(linger), "%g", shim_linger_seconds(r.grace_seconds));
  argv.insert(argv.end(),
              {in.self_exe, "--worker-shim", std::string("--linger-seconds=") + linger, "--"});
  argv.insert(argv.end(), r.program.begin(), r.program.end());
  return argv;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) {
    if (!line.empty()) line += ' ';
    bool plain = !a.empty();
    for (char c : a) {
      const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') ||
                        std::string_view("@%_+=:,./-").find(c) != std::string_view::npos;
      if (!safe) plain = false;
    }
    if (plain) {
      line += a;
      continue;
    }
    line += '\'';
    for (char c : a) {
      if (c == '\'') {
        line += "'\\''";
      } else {
        line += c;
      }
    }
    line += '\'';
  }
  return line;
}

}  // namespace kolo::launcher
