#!/usr/bin/env bash
# README's test command: set up, build, run every test (unit, multi-process, launcher).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" --timeout 600
