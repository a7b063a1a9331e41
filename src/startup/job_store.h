// The job's store for jobs that meet through one (LaunchEnv::uses_store(): kolorun's own
// launcher, TF_CONFIG, torch-style variables, Slurm with a store address): the TCP store
// server when this process hosts it (rank 0 of a job started without kolorun), a client
// to it, and the start-up barrier that waits, bounded, for every task of the job.
//
//   JobStore job;
//   KOLO_RETURN_IF_ERROR(open_job_store(launch, config, &job));
//   KOLO_RETURN_IF_ERROR(join_job(job, launch, config.start_timeout_seconds));
//   ... the transport's rendezvous through job.store (under a PrefixStore of its own) ...
//
// Lifetime: kolo::init() opens the JobStore once per process and keeps it until the
// process exits, so that init after shutdown finds it (each init's keys go under its own
// "init/<n>" prefix, join_job included). On the hosting process the server must outlive
// every other task's use of the store (their join_job, the transport's rendezvous, later
// inits); a hosting process that exits early takes the job's keys with it and the others
// fail at once, naming it (rendezvous/tcp_store.h).
//
// Not for: which launcher started the job, or where its store is (launch_env.h); the
// store itself (src/rendezvous).
#pragma once

#include <memory>

#include "common/status.h"
#include "rendezvous/store.h"
#include "rendezvous/tcp_store_server.h"
#include "startup/config.h"
#include "startup/launch_env.h"

namespace kolo::core {

struct JobStore {
  // The server, when this process hosts the store (launch.hosts_store); else null.
  std::unique_ptr<rendezvous::TcpStoreServer> server;
  // A client of the job's store (on the hosting process too, through loopback).
  std::shared_ptr<rendezvous::Store> store;
};

// Starts the server when `launch` says this process hosts the store (it binds
// launch.store_bind at launch.store_port), then connects a client, retrying for
// config.start_timeout_seconds (the host may start last), with launch.secret. Errors name
// the store, who hosts it, and what to do: kInvalidArgument when the port cannot be bound
// (in use?) or the server refuses the secret; kPeerFailure when no server answered in time.
// Without a secret the server accepts only processes on its own host; in a job across
// hosts, set KOLO_RENDEZVOUS_SECRET to the same value in every task (the messages say so).
// kInvalidArgument when `launch` is not a store job.
Status open_job_store(const LaunchEnv& launch, const Config& config, JobStore* out);

// The start-up barrier: this rank sets "start/arrived/<rank>" (its host name and pid)
// and waits until every rank's key exists, at most `start_timeout_s` (the
// KOLO_START_TIMEOUT_SECONDS option). Past it: kPeerFailure naming the ranks that never
// arrived, by their TF_CONFIG names where there are some ("start-up timed out after 5 s:
// worker 2 (localhost:23457) never arrived; ..."). Two processes claiming one rank, or
// ranks that disagree about the job's size, are kInvalidArgument naming both.
// All or nothing: the outcome is decided once, in the store ("start/outcome"), by the first
// task to decide (one that saw every rank arrive, or one that timed out), and every task
// that came reports that outcome; a failure names the task that decided it ("... (reported
// by rank 0)") when that was another task. The task that decides a failure wakes the
// others at once; the hosting task serves on (at most 2 s) until the others have read the
// outcome, so they report the same missing tasks instead of a lost connection; a task that
// comes later is told start-up failed.
Status join_job(JobStore& job, const LaunchEnv& launch, double start_timeout_s);

}  // namespace kolo::core
