#!/usr/bin/env bash
# Steady-state cost of elastic mode (issue 16's second benchmark, docs/history/benchmarks.md
# "Elastic recovery (issue 16)"): images/s of fashion_mnist on 2 local workers, with
# `--elastic --commit-every N` under kolorun's elastic driver against the same training
# without elastic mode, nothing failing. Goal: elastic / plain >= 0.98.
#
#   plain     kolorun -np 2 fashion_mnist --epochs 1 --train-limit N ...
#   elastic   kolorun --min-np 1 --max-np 2 -np 2 fashion_mnist --elastic --commit-every N
#                 --epochs 1 --train-limit N ...
#
# images/s is fashion_mnist's own figure (its --summary-json's images_per_sec: images of the
# training loop over all workers / the loop's wall time). The pairs run in ABBA order round
# by round (plain, elastic, then elastic, plain) so that the machine's drift weighs alike
# on both; prints each run, the medians and the median and range of the per-round ratios,
# and PASS/MISS for the goal. A benchmark, not a test: it exits 0 unless something fails.
#
#   bench/elastic_throughput.sh [--train-limit 30000] [--commit-every 100] [--repeat 3]
#                               [--batch-size 64] [--build DIR]
#
# Builds nothing: expects kolorun and fashion_mnist in BUILD/bin (cd build && nice make
# kolorun fashion_mnist), and a fashion_mnist that has --elastic.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=30000 commit_every=100 repeat=3 batch=64 build=build
while [ $# -gt 0 ]; do
  case $1 in
    --train-limit) limit=$2; shift 2 ;;
    --commit-every) commit_every=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
bin=$build/bin
for f in "$bin/fashion_mnist" "$bin/kolorun"; do
  [ -x "$f" ] || { echo "missing $f: build first (cd $build && nice make kolorun fashion_mnist)" >&2; exit 1; }
done
if ! "$bin/fashion_mnist" --help 2>&1 | grep -q -- '--elastic'; then
  echo "$bin/fashion_mnist has no --elastic option (issue 16's fit integration): rebuild it from a" \
    "branch that has it" >&2
  exit 1
fi
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist
common=(--epochs 1 --train-limit "$limit" --batch-size "$batch" --data "$data" --no-progress)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

# run NAME ROUND: one run; its output in $work/NAME.ROUND.log, its summary in NAME.ROUND.json.
run() {
  local name=$1 r=$2 t0=$SECONDS
  local out=$work/$name.$r
  local cmd=("$bin/kolorun" -np 2 "$bin/fashion_mnist" "${common[@]}" --summary-json "$out.json")
  [ "$name" = elastic ] && cmd=("$bin/kolorun" --min-np 1 --max-np 2 -np 2 "$bin/fashion_mnist"
    --elastic --commit-every "$commit_every" "${common[@]}" --summary-json "$out.json")
  printf '  %-8s ' "$name" >&2
  local rc=0
  timeout 1800 "${cmd[@]}" > "$out.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    local why="exit $rc"
    [ "$rc" -eq 124 ] && why="still running after 30 minutes"
    echo "did not finish ($why); command: ${cmd[*]}; its output:" >&2
    tail -20 "$out.log" >&2
    exit 1
  fi
  local ips
  ips=$("$py" -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1])).get("images_per_sec", -1))' \
    "$out.json")
  if [ "$ips" = "-1.0" ]; then
    echo "$name: $bin/fashion_mnist wrote no images_per_sec in its --summary-json ($out.json:" \
      "$(tr -d '\n' < "$out.json")); command: ${cmd[*]}" >&2
    exit 1
  fi
  echo "$ips images/s ($((SECONDS - t0)) s)" >&2
}

echo "elastic_throughput: 2 workers, the first $limit training images (one epoch), batch $batch, commit every" \
  "$commit_every steps; $(date '+%Y-%m-%d %H:%M'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" >&2
for r in $(seq 1 "$repeat"); do
  echo "round $r (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  if [ $((r % 2)) -eq 1 ]; then run plain "$r"; run elastic "$r"; else run elastic "$r"; run plain "$r"; fi
done

"$py" - "$work" "$repeat" "$commit_every" <<'PY'
import json, statistics, sys
work, repeat, every = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ips = {n: [json.load(open(f"{work}/{n}.{r}.json"))["images_per_sec"] for r in range(1, repeat + 1)]
       for n in ("plain", "elastic")}
ratios = [e / p for e, p in zip(ips["elastic"], ips["plain"])]
med = {n: statistics.median(v) for n, v in ips.items()}
print(f"| run | images/s (median of {repeat}) |")
print("|---|---:|")
print(f"| kolorun -np 2 fashion_mnist | {med['plain']:.1f} |")
print(f"| kolorun --min-np 1 --max-np 2 -np 2 fashion_mnist --elastic --commit-every {every} | {med['elastic']:.1f} |")
r = statistics.median(ratios)
print(f"elastic / plain: {r:.3f} (per round {min(ratios):.3f}-{max(ratios):.3f}); goal >= 0.98: "
      f"{'PASS' if r >= 0.98 else 'MISS'}")
PY
