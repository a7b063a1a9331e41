#!/usr/bin/env bash
# README's main job: set up, build, and run the demo across 2 local workers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/bin/kolorun -np 2 build/bin/allreduce_demo "$@"
