// Launch environment: which launcher started this process, and the rank it assigned.
//
// kolo::init() uses it to choose a transport (a job of one process needs none) and to
// cross-check the transport's ranks. Pure: it reads an environment map.
#pragma once

#include <string>

#include "core/config.h"

namespace kolo::core {

struct LaunchEnv {
  std::string launcher = "none";  // "kolorun", "mpirun", "slurm", "pmi" or "none"
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
};

// Precedence: KOLO_* (kolorun), OMPI_COMM_WORLD_* (OpenMPI's mpirun), PMI_* (MPICH's
// hydra), SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun).
LaunchEnv detect_launch_env(const Env& env);

}  // namespace kolo::core
