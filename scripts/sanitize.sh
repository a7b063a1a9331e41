#!/usr/bin/env bash
# The unit and in-process tests under ASan+UBSan and under TSan (separate builds:
# build-asan, build-tsan). The 1M-element cases are skipped (KOLO_TEST_QUICK=1); MPI
# programs are not run under the sanitizers (OpenMPI itself is not sanitizer-clean), and
# the libtorch adapter is left out (libtorch is not built with sanitizers; its tests run
# in the release build).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export KOLO_TEST_QUICK=1
for kind in address thread; do
  dir=build-${kind/address/asan}
  dir=${dir/thread/tsan}
  BUILD_DIR=$dir BUILD_TYPE=RelWithDebInfo scripts/build.sh -DKOLO_SANITIZE=$kind -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 TSAN_OPTIONS=halt_on_error=1 \
     ctest --output-on-failure -j"$(nproc)" -L unit --timeout 900)
done
