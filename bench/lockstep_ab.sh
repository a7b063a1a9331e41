#!/usr/bin/env bash
# Where issue 3's training ceiling is (docs/history/benchmarks.md, session 3): per-worker images/s
# of kolo_step_profile in four configurations, round after round so that each round sees
# the same machine state:
#   kolo2        kolorun -np 2 (gradients averaged through kolo, on-demand cycles)
#   kolo2_timer  the same with KOLO_CYCLE_ON_DEMAND=0
#   lockstep     kolorun -np 2 --lockstep-only 1 (no averaging, a barrier per step)
#   indep        two KOLO_TRANSPORT=local processes at once (mean of the two)
# then the per-round ratios' medians. A diagnostic, not a test.
#
#   bench/lockstep_ab.sh [ROUNDS (default 6)] [STEPS (default 300)] [BUILD (default build)]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-6} steps=${2:-300} build=${3:-build}
scripts/setup.sh --bench  # python3 for the summary, installed when missing
prof=$build/bin/kolo_step_profile
[ -x "$prof" ] || { echo "missing $prof: build it first" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out" "$out.i"' EXIT
rate() { grep -oE "[0-9]+ images/s" | head -1 | cut -d' ' -f1; }
for round in $(seq "$rounds"); do
  echo "round $round kolo2 $("$build/bin/kolorun" -np 2 "$prof" --max-steps "$steps" 2>&1 | grep 'rank 0 of 2' | rate)" | tee -a "$out"
  echo "round $round kolo2_timer $(KOLO_CYCLE_ON_DEMAND=0 "$build/bin/kolorun" -np 2 "$prof" --max-steps "$steps" 2>&1 | grep 'rank 0 of 2' | rate)" | tee -a "$out"
  echo "round $round lockstep $("$build/bin/kolorun" -np 2 "$prof" --max-steps "$steps" --lockstep-only 1 2>&1 | grep 'rank 0 of 2' | rate)" | tee -a "$out"
  KOLO_TRANSPORT=local "$prof" --max-steps "$steps" > "$out.i" 2>&1 &
  second=$(KOLO_TRANSPORT=local "$prof" --max-steps "$steps" 2>&1 | rate)
  wait
  first=$(rate < "$out.i")
  echo "round $round indep $(( (first + second) / 2 ))" | tee -a "$out"
done
/usr/bin/python3 - "$out" <<'PY'
import re, statistics as st, sys
rounds = {}
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (\S+) (\d+)", line)
    if m:
        rounds.setdefault(m.group(1), {})[m.group(2)] = int(m.group(3))
rows = [r for r in rounds.values() if len(r) == 4]
for a, b in [("kolo2", "indep"), ("lockstep", "indep"), ("kolo2", "lockstep"), ("kolo2", "kolo2_timer")]:
    ratios = [r[a] / r[b] for r in rows]
    print(f"{a}/{b}: per round {' '.join(f'{x:.3f}' for x in ratios)}; median {st.median(ratios):.3f}")
PY
