#!/usr/bin/env bash
# Recovery time of an elastic job after kill -9 of one worker, kolo against torchrun, at
# 2 -> 1, 3 -> 2 and 4 -> 3 workers (torchrun: N -> N, it restarts every worker); median,
# min and max of --runs runs, as a Markdown table with the CPU and the date
# (docs/history/benchmarks.md, "Elastic recovery (issue 16)"). The work is bench/elastic_recovery.py
# (its --help has every option and how the time is measured); this wrapper installs torch
# when it is missing.
#
#   bench/elastic_recovery.sh [--runs 5] [--sizes "2 3 4"] [--systems "torchrun kolo"]
#       [--build-dir build] [--kolo-program core|fashion_mnist] [--json FILE]
#   bench/elastic_recovery.sh --self-test   # the harness against a stand-in kolorun
#
# Builds nothing: expects kolorun and kolo_elastic_core_worker (or fashion_mnist) in
# BUILD/bin (cd build && nice make kolorun kolo_elastic_core_worker) and Debian's
# python3-torch at /usr/bin/python3 (scripts/setup.sh --bench).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
case " $* " in
  *" --self-test "* | *" -h "* | *" --help "*) ;;
  *" --systems kolo "*) ;;
  *) /usr/bin/python3 -c 'import torch' 2> /dev/null || "$root/scripts/setup.sh" --bench ;;
esac
exec /usr/bin/python3 "$here/elastic_recovery.py" "$@"
