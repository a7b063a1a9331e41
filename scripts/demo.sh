#!/usr/bin/env bash
# README's main job: set up, build, and train the founding example's CNN on
# Fashion-MNIST across 2 local workers (extra arguments go to fashion_mnist, e.g.
# --epochs 1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/bin/kolorun -np 2 build/bin/fashion_mnist "$@"
