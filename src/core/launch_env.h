// Launch environment: which launcher started this process, the rank it assigned, and the
// test hook that fakes hosts (KOLO_TEST_HOSTS); and the TransportContext made from it and
// the Config, which is all a transport factory learns of the process's environment.
//
// kolo::init() uses it to choose a transport (a job of one process needs none), to
// cross-check the transport's ranks and to hand the transport its context. Pure: it reads
// an environment map (a KOLO_TEST_HOSTS that is not a number is ignored with a warning).
#pragma once

#include <string>

#include "core/config.h"
#include "transport/table.h"

namespace kolo::core {

struct LaunchEnv {
  std::string launcher = "none";  // "kolorun", "mpirun", "slurm", "pmi" or "none"
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  // KOLO_TEST_HOSTS (test-only; 0 = off): pretend the ranks run on this many hosts, so one
  // machine exercises multi-host code paths (see transport::MpiOptions::test_hosts).
  int test_hosts = 0;
};

// Precedence: KOLO_* (kolorun), OMPI_COMM_WORLD_* (OpenMPI's mpirun), PMI_* (MPICH's
// hydra), SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun).
LaunchEnv detect_launch_env(const Env& env);

// The slice of `config` and `launch` a transport factory is handed.
transport::TransportContext transport_context(const Config& config, const LaunchEnv& launch);
// The same from an environment (parse_config, then detect_launch_env): for programs that
// create a transport without a runtime (the transports' check programs).
Status transport_context(const Env& env, transport::TransportContext* out);

}  // namespace kolo::core
