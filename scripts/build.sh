#!/usr/bin/env bash
# Configures and builds kolo into ${BUILD_DIR:-build} (Release unless BUILD_TYPE is set):
# everything, or only ${BUILD_TARGETS} (space-separated targets and what they need).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "$@" >/dev/null
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
