// open_check_job (check_job.h).
#include "check_job.h"

#include "startup/config.h"

namespace kolo::transport::check {

Status open_check_job(CheckJob* job) {
  const core::Env env = core::process_env();
  core::Config config;
  KOLO_RETURN_IF_ERROR(core::parse_config(env, &config));
  KOLO_RETURN_IF_ERROR(core::detect_launch_env(env, &job->launch));
  job->transport =
      config.transport == "auto" ? core::auto_transport(job->launch) : config.transport;
  job->factory = find_transport(job->transport);
  if (job->factory == nullptr) {
    return Status(ErrorCode::kUnsupported,
                  "KOLO_TRANSPORT=" + job->transport + ": this build has no such transport");
  }
  job->context = core::transport_context(config, job->launch);
  if (job->launch.uses_store() && job->launch.size > 1) {
    KOLO_RETURN_IF_ERROR(core::open_job_store(job->launch, config, &job->store));
    KOLO_RETURN_IF_ERROR(core::join_job(job->store, job->launch, config.start_timeout_seconds));
    job->context.store = job->store.store;
  }
  job->context.deadline = deadline_after(60);
  return Status::OK();
}

}  // namespace kolo::transport::check
