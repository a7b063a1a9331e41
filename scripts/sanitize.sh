#!/usr/bin/env bash
# The unit and in-process tests under ASan+UBSan and under TSan (separate builds:
# build-asan, build-tsan, without the examples, the benchmark programs and the transports'
# multi-process check programs, which no test there runs). The 1M-element cases are skipped (KOLO_TEST_QUICK=1). MPI programs are not
# run under the sanitizers (OpenMPI itself is not sanitizer-clean), except the libtorch
# adapter's checks: kolo_torch_worker on one worker and on 2 and 3 workers through
# kolorun, under both. ASan: leak detection on for one worker, off through kolorun
# (OpenMPI and hwloc leak at exit). TSan: libtorch is not instrumented, so
# scripts/tsan.supp ignores what libtorch itself does (see there); kolo's threads are
# still checked against each other.
# kolo_train (src/train) is left out by default: compiling it under both sanitizers
# would take CI past its time (measured on 2 cores shared with other builds, before the
# precompiled <torch/torch.h>: its 18 sources, 8 test files and the worker took about
# 19 min of the -j2 build under ASan and 13 under TSan; its tests 12-16 s as the five
# gtest binaries, which is how ctest now runs them, one entry each; the equivalence
# through kolorun 6-7 s). --train builds and runs it too (its unit tests, and the
# multi-worker equivalence through kolorun, which is leak-clean: it starts no MPI, so
# its leak check stays on).
# Each tree builds only what its tests run (BUILD_TARGETS): kolo_unit_tests (every
# program `ctest -L unit` runs, CMakeLists.txt's kolo_unit_test_target), kolorun and the
# torch workers; not the rest of the lean configuration (kolo_bench, the multi-process
# test program, the fuzz seed generators, the habits worker), about 10 files fewer each.
# Both trees use the precompiled <torch/torch.h> (cmake/torch_pch.cmake): a libtorch
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
targets="kolo_unit_tests kolorun kolo_torch_worker"
[ $train = ON ] && targets+=" kolo_train_worker"
export BUILD_TARGETS=$targets
BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo scripts/build.sh -DKOLO_SANITIZE=address "${lean[@]}"
(
  cd build-asan
  ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$(nproc)" -L unit --timeout 900
  ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -R '^torch\.worker_np1$' --timeout 900
  ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -R '^torch\.kolorun_np' --timeout 900
  if [ $train = ON ]; then
    ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -R '^train\.kolorun_np2' --timeout 900
  fi
)
BUILD_DIR=build-tsan BUILD_TYPE=RelWithDebInfo scripts/build.sh -DKOLO_SANITIZE=thread "${lean[@]}"
(
  cd build-tsan
  export TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/../scripts/tsan.supp"
  ctest --output-on-failure -j"$(nproc)" -L unit --timeout 900
  ctest --output-on-failure -R '^torch\.(worker_np1|kolorun_np)' --timeout 900
  if [ $train = ON ]; then ctest --output-on-failure -R '^train\.kolorun_np2' --timeout 900; fi
)
