// The job a transport check program runs in (kolo_gloo_check, kolo_shm_check,
// kolo_hier_check), set up as kolo::init() sets up a job: the KOLO_* options and the
// launch environment, the base transport KOLO_TRANSPORT names (auto: gloo under kolorun's
// own launcher, mpi under mpirun), and for a job that meets through a store the job's
// store (core::open_job_store: kolorun's, or rank 0's when started without kolorun) and
// the bounded start-up barrier (core::join_job). Test code only.
//
//   CheckJob job;
//   Status s = open_check_job(&job);
//   if (s.ok()) s = job.factory->create(job.context, &base);          // the base alone
//   if (s.ok()) s = create_communicator(*job.factory, job.context, &comm);  // with layers
//
// The CheckJob must outlive every communicator made from it (it holds the store).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "startup/job_store.h"
#include "startup/launch_env.h"
#include "transport/table.h"

namespace kolo::transport::check {

struct CheckJob {
  core::LaunchEnv launch;
  std::string transport;  // the base's name: "mpi", "gloo" or "local"
  const TransportFactory* factory = nullptr;
  TransportContext context;  // with the job's store; the deadline is 60 s from opening
  core::JobStore store;      // empty for a job without a store (mpirun)
};

// Fills *job; errors say which variable or transport is missing and what to do.
Status open_check_job(CheckJob* job);

}  // namespace kolo::transport::check
