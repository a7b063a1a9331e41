#!/usr/bin/env bash
# The unit and in-process tests under ASan+UBSan and under TSan (separate builds:
# build-asan, build-tsan). The 1M-element cases are skipped (KOLO_TEST_QUICK=1).
# MPI programs are not run under the sanitizers (OpenMPI itself is not sanitizer-clean),
# except the libtorch adapter's checks under ASan: kolo_torch_worker on one worker (leak
# detection on) and on 2 and 3 workers through kolorun (leak detection off: OpenMPI and
# hwloc leak at exit). libtorch is not built with sanitizers, which ASan tolerates; TSan
# needs every library that runs threads instrumented (libtorch and its OpenMP runtime are
# not), so the TSan build leaves the adapter out.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export KOLO_TEST_QUICK=1
BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo scripts/build.sh -DKOLO_SANITIZE=address
(
  cd build-asan
  ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$(nproc)" -L unit --timeout 900
  ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -R '^torch\.worker_np1$' --timeout 900
  ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -R '^torch\.kolorun_np' --timeout 900
)
BUILD_DIR=build-tsan BUILD_TYPE=RelWithDebInfo scripts/build.sh -DKOLO_SANITIZE=thread \
  -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j"$(nproc)" -L unit --timeout 900)
