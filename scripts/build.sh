#!/usr/bin/env bash
# Configures and builds kolo into ${BUILD_DIR:-build} (Release unless BUILD_TYPE is set).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
