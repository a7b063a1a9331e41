#!/usr/bin/env bash
# README's main job: set up, build, and train the founding example's CNN on
# Fashion-MNIST across 2 local workers (extra arguments go to fashion_mnist, e.g.
# --epochs 1). Installs and builds only what it runs (kolorun and fashion_mnist);
# scripts/test.sh later builds the rest into the same build/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --demo
BUILD_TARGETS="kolorun fashion_mnist" scripts/build.sh
exec "${BUILD_DIR:-build}"/bin/kolorun -np 2 "${BUILD_DIR:-build}"/bin/fashion_mnist "$@"
