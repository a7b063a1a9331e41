#!/usr/bin/env bash
# Paired A/B of two kolo builds (e.g. before and after a refactor that must not change
# speed): round after round, each build runs the same benchmarks back to back, so both
# see the same machine state; then the medians over rounds and new/old ratios.
#   latency      kolo_bench latency (4-byte allreduce through the runtime), median us
#   gradients    kolo_bench gradients --model resnet50: step time, median ms
#   allreduce    kolo_bench allreduce at 64 KiB, 4 MiB and 64 MiB: algorithm GB/s
#   training     kolo_step_profile (the CNN on Fashion-MNIST), images/s of rank 0
# OMP_NUM_THREADS is 1 for both unless set (kolorun sets a default only since issue 12,
# and libtorch's thread count is not what an A/B of kolo's runtime measures).
# A diagnostic for docs/benchmarks.md, not a test.
#
#   bench/ab_builds.sh OLD_BUILD NEW_BUILD [ROUNDS (default 5)] [NP (default 2)]
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/ab_builds.sh OLD_BUILD NEW_BUILD [ROUNDS] [NP]} new=${2:?}
rounds=${3:-5} np=${4:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
scripts/setup.sh --bench  # python3 for the summary, installed when missing
for b in "$old" "$new"; do
  for p in kolorun kolo_bench kolo_step_profile; do
    [ -x "$b/bin/$p" ] || { echo "missing $b/bin/$p: build it first" >&2; exit 1; }
  done
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {  # build tag
  local b=$1 tag=$2 r=$3
  "$b/bin/kolorun" -np "$np" "$b/bin/kolo_bench" latency --iters 3000 --json "$out/$tag.lat.$r.json" >/dev/null 2>&1
  "$b/bin/kolorun" -np "$np" "$b/bin/kolo_bench" gradients --iters 10 --json "$out/$tag.grad.$r.json" >/dev/null 2>&1
  "$b/bin/kolorun" -np "$np" "$b/bin/kolo_bench" allreduce --min-bytes 64K --max-bytes 64M --step 4 \
    --json "$out/$tag.ar.$r.json" >/dev/null 2>&1
  "$b/bin/kolorun" -np "$np" "$b/bin/kolo_step_profile" --max-steps 300 2>&1 |
    grep 'rank 0 of' | grep -oE "[0-9]+ images/s" | head -1 | cut -d' ' -f1 > "$out/$tag.train.$r.txt"
}
for r in $(seq "$rounds"); do
  echo "round $r of $rounds" >&2
  if (( r % 2 )); then run "$old" old "$r"; run "$new" new "$r"; else run "$new" new "$r"; run "$old" old "$r"; fi
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def load(tag, kind, r):
    with open(f"{d}/{tag}.{kind}.{r}.{'txt' if kind == 'train' else 'json'}") as f:
        return f.read() if kind == 'train' else json.load(f)
rows = [("latency 4 B (us)", lambda j: j["time_us_median"], "lat"),
        ("resnet50 gradient step (ms)", lambda j: j["step_time_us_median"] / 1000, "grad"),
        ("resnet50 step/single", lambda j: j["ratio_step_single"], "grad")]
def ar(size):
    def f(j):
        rows = j["rows"] if isinstance(j, dict) else j
        for row in rows:
            if row["bytes"] == size: return row["algbw_gbps"]
    return f
for size, name in [(65536, "64 KiB"), (4 << 20, "4 MiB"), (64 << 20, "64 MiB")]:
    rows.append((f"allreduce {name} (GB/s)", ar(size), "ar"))
rows.append(("training (images/s, rank 0)", lambda t: float(t.strip()), "train"))
print(f"{'measure':32} {'old':>10} {'new':>10} {'new/old':>8}   per-round new/old")
for name, get, kind in rows:
    o = [get(load("old", kind, r)) for r in range(1, rounds + 1)]
    n = [get(load("new", kind, r)) for r in range(1, rounds + 1)]
    per = [b / a for a, b in zip(o, n)]
    print(f"{name:32} {statistics.median(o):10.3f} {statistics.median(n):10.3f} "
          f"{statistics.median(per):8.3f}   " + " ".join(f"{x:.2f}" for x in per))
PY
