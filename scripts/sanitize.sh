#!/usr/bin/env bash
# The unit and in-process tests under ASan+UBSan and under TSan (separate builds:
# build-asan, build-tsan, without the examples, the benchmark programs and the transports'
# multi-process check programs, which no test there runs). The 1M-element cases are
# skipped (KOLO_TEST_QUICK=1). MPI programs are not run under the sanitizers (OpenMPI
# itself is not sanitizer-clean), except the libtorch adapter's checks under ASan:
# kolo_torch_worker on one worker and on 2 and 3 workers through kolorun (leak detection
# on for one worker, off through kolorun: OpenMPI and hwloc leak at exit). The TSan tree
# is built without libtorch (since 2026-12-07, to keep CI under its 45 minutes):
# scripts/tsan.supp still says what libtorch's uninstrumented code looks like to TSan.
# Elastic jobs (issue 16): the worker side across real processes (tests/elastic's
# ElasticWorkerSide cases: kolo::init and elastic::reset start a new Runtime and Gloo
# world per generation in the same process) under both (ASan: leak check on);
# kolo/elastic.h through kolorun with 3 workers (torch.elastic_kolorun_np3) under ASan,
# leak check on (it is clean); the driver's and its plans' tests are in kolorun_tests
# and kolo_launcher_tests.
# kolo_train (src/train) is left out by default: compiling it under both sanitizers
# would take CI past its time (measured on 2 cores shared with other builds, before the
# precompiled <torch/torch.h>: its 18 sources, 8 test files and the worker took about
# 19 min of the -j2 build under ASan and 13 under TSan; its tests 12-16 s as the five
# gtest binaries, which is how ctest now runs them, one entry each; the equivalence
# through kolorun 6-7 s). --train builds and runs it too under ASan (its unit tests, and
# the multi-worker equivalence through kolorun, which is leak-clean: it starts no MPI, so
# its leak check stays on); not under TSan, whose tree has no libtorch.
# Each tree builds only what its tests run (BUILD_TARGETS): ASan kolo_unit_tests (every
# program `ctest -L unit` runs, CMakeLists.txt's kolo_unit_test_target), TSan the part of
# them that runs threads against each other (tsan_programs below), both kolorun, ASan the
# torch workers; not the rest of the lean configuration (kolo_bench, the multi-process
# test program, the fuzz seed generators, the habits worker), about 10 files fewer each.
# The ASan tree uses the precompiled <torch/torch.h> (cmake/torch_pch.cmake): a libtorch
# file under ASan -O1 measured 23-48 s of CPU without it, 8-21 s with (docs/ci.md).
set -euo pipefail
cd "$(dirname "$0")/.."
train=OFF
[ "${1:-}" = "--train" ] && train=ON
scripts/setup.sh
export KOLO_TEST_QUICK=1
# -O1 -g1 (line tables, enough for the sanitizers' stack traces) compiles in about half
# the time of RelWithDebInfo's -O2 -g (61 s -> 32 s for a libtorch file under ASan), which
# keeps CI's whole run under its 45 minutes.
lean=(-DKOLO_BUILD_EXAMPLES=OFF -DKOLO_BUILD_BENCH=OFF -DKOLO_BUILD_TRANSPORT_CHECKS=OFF
      -DKOLO_BUILD_TRAIN=$train
      -UCMAKE_DISABLE_FIND_PACKAGE_Torch
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
# Both trees: kolorun, the libtorch worker, and the elastic worker side across real
# processes (tests/elastic: kolo_elastic_worker_side_tests starts kolo_elastic_core_worker,
# which kolo::init's and kolo::elastic::reset's each generation in the same process: the
# runtime's thread stopped, a new Runtime and Gloo world started).
targets="kolorun kolo_torch_worker kolo_elastic_worker_side_tests"
[ $train = ON ] && targets+=" kolo_train_worker"
tsan_targets="kolorun kolo_elastic_worker_side_tests"
# What the two trees run (measured figures: docs/ci.md, "The sanitizer job's selection").
# Both: the 8-rank collectives are left out (Ranks/Collectives.*/8ranks*: 12 entries,
# 10 s of the ASan run): 1, 2, 3 and 4 ranks run the same code, and 8 adds only more
# threads doing it. KOLO_TEST_QUICK=1 drops the 1M-element sizes (collectives_test) and
# shrinks the shm tests' large allreduces with their regions (shm_allreduce_test: the four
# ShmAllreducePiecesTest cases 84 s of 467 under ASan, 2.3 s quick).
skip_both='/8ranks(Fused|Unfused)'
# ASan+UBSan: every unit-test program (kolo_unit_tests) and every entry but those.
# And kolo/elastic.h across 3 workers through kolorun (kolo_torch_elastic_worker: sync's
# root, TorchState, the ElasticSampler's collectives); its unit tests, kolo_torch_elastic_tests,
# are in kolo_unit_tests. Its kolo code runs on the calling thread: not in the TSan tree.
asan_targets="kolo_unit_tests $targets kolo_torch_elastic_worker"
# TSan: only the programs whose tests run threads against each other: the runtime's
# background thread and ranks as threads over inproc and shm (kolo_core_tests,
# kolo_transport*_tests, kolo_api_tests), the TCP store server (kolo_rendezvous_tests,
# kolo_job_store_tests, kolo_transport_gloo_tests), the ps RPC server and client and the
# coordinator (kolo_ps_tests), kolorun and its store (kolorun_tests, kolo_mp_worker), and
# the libtorch worker through kolorun. Left to ASan: the single-threaded logic (reduce
# kernels and conversions: kolo_common_tests; options, launch environments, TF_CONFIG:
# kolo_startup_unit_tests; messages, negotiation, plans: kolo_core_unit_tests, whose 6
# ControllerPeerTest cases drive a Controller against InprocWorld as the runtime tests do
# through Runtime; the launcher's parsers and plans: kolo_launcher_tests; the fuzz corpus
# replays; the libtorch data, checkpoint and update
# rule programs, whose kolo code runs on the calling thread only). Not building those
# saves about 300 s of TSan compile CPU (19 files, 3 of them libtorch tests).
tsan_programs="kolo_rendezvous_tests kolo_job_store_tests kolo_transport_tests
  kolo_transport_shm_tests kolo_transport_hier_tests kolo_transport_gloo_tests kolo_core_tests
  kolo_api_tests kolo_ps_tests kolorun_tests kolo_mp_worker"
tsan_not_built="kolo_common_tests kolo_startup_unit_tests kolo_core_unit_tests kolo_launcher_tests
  kolo_torch_data_tests kolo_torch_checkpoint_tests kolo_torch_elastic_tests kolo_ps_torch_tests"
# A program not built shows in ctest as <target>_NOT_BUILT (gtest discovery) or as its own
# name (one entry per libtorch program); only these are skipped, so a new unit-test
# program missing from both lists fails the TSan run until it is put in one of them.
tsan_skip="$skip_both|^fuzz\\.|^($(echo $tsan_not_built | tr ' ' '|'))(_NOT_BUILT)?\$"
export BUILD_TARGETS=$asan_targets
# UBSan without its alignment and null checks: with them GCC 12 takes about twice as long
# per file (controller.cc 9.5 s of CPU against 4.9 s, launcher/job.cc 8.0 against 5.3);
# ASan still stops a null dereference, and the other UBSan checks stay.
BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo scripts/build.sh -DKOLO_SANITIZE=address \
  -DKOLO_UBSAN_SKIP=alignment,null "${lean[@]}"
(
  cd build-asan
  ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$(nproc)" -L unit -E "$skip_both" \
    --timeout 900
  ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -R '^torch\.worker_np1$' --timeout 900
  ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -R '^torch\.kolorun_np' --timeout 900
  ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -R '^torch\.elastic_kolorun_np3$' \
    --timeout 900
  ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -R '^elastic\.ElasticWorkerSide\.' \
    --timeout 900
  if [ $train = ON ]; then
    ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -R '^train\.kolorun_np2' --timeout 900
  fi
)
# Without libtorch (CMAKE_DISABLE_FIND_PACKAGE_Torch): the adapter's kolo code runs on the
# caller's thread against the runtime's, which kolo_api_tests check here; ASan runs the
# libtorch workers. Building kolo_torch, its two precompiled headers and the worker took
# about 95 s of the job's wall time and their TSan runs 12 s (docs/ci.md).
BUILD_TARGETS="$tsan_programs $tsan_targets" BUILD_DIR=build-tsan BUILD_TYPE=RelWithDebInfo \
  scripts/build.sh -DKOLO_SANITIZE=thread "${lean[@]}" -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON
(
  cd build-tsan
  export TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/../scripts/tsan.supp"
  # A program of the list left in the tree by an earlier build would still be run (its
  # discovered cases are listed while its <target>[N]_tests.cmake exists).
  for p in $tsan_not_built; do
    rm -f "bin/$p"
    find . -name "$p\[*\]_tests.cmake" -delete
  done
  ctest --output-on-failure -j"$(nproc)" -L unit -E "$tsan_skip" --timeout 900
  ctest --output-on-failure -R '^elastic\.ElasticWorkerSide\.' --timeout 900
)
