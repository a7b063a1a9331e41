#!/usr/bin/env bash
# End-to-end training benchmark: Fashion-MNIST (examples/fashion_mnist.cc's model, batch 64
# per worker, Adam, one torch thread per worker) on this host, run back to back so that
# every configuration sees the same machine state:
#
#   plain   plain libtorch, 1 process, no kolo              (build/bin/plain_fashion_mnist)
#   kolo1   fashion_mnist, 1 worker, no launcher             (kolo's local transport)
#   ddp1    PyTorch DDP (Gloo), 1 worker                     (bench/ddp_fashion_mnist.py)
#   ddp2    PyTorch DDP (Gloo), 2 workers
#   kolo2   kolorun -np 2 fashion_mnist                      (shared-memory transport)
#   indep2  two independent 1-worker fashion_mnist runs started together
#           (KOLO_TRANSPORT=local): the most 2 workers can get from this machine
#
# images/s = images of the training loop over all workers / wall time of the loop (no data
# loading, no evaluation). Every configuration runs --max-steps steps per worker; DDP runs
# --warmup-steps more first and does not time them (kolo and plain time every step, as
# the example does, which if anything favours DDP). A benchmark, not a test: it always
# exits 0 (unless something fails to run) and prints PASS/MISS for each goal:
#   kolo2/ddp2 >= 1.15, kolo2/indep2 >= 0.95, kolo1/plain >= 0.98.
#
# Usage: bench/train_bench.sh [--max-steps N] [--warmup-steps N] [--batch-size N]
#                             [--build DIR] [--only LIST] [--repeat N]
#   --only plain,kolo1,... runs a subset (ratios need both peers); --repeat N runs the
#   whole sequence N times and prints one table per round, the medians, and the median
#   and range of the per-round ratios (the paired figure on a machine that drifts).
# KOLO_* variables in the environment (e.g. KOLO_CYCLE_TIME_MS=5) reach every kolo run.
set -euo pipefail
cd "$(dirname "$0")/.."

max_steps=300 warmup=5 batch=64 build=build only="plain,kolo1,ddp1,kolo2,ddp2,indep2" repeat=1
while [ $# -gt 0 ]; do
  case $1 in
    --max-steps) max_steps=$2; shift 2 ;;
    --warmup-steps) warmup=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

# python3 with torch and numpy (the DDP peer, the tables): installed here when missing.
scripts/setup.sh --bench
py=/usr/bin/python3  # Debian's python3-torch lives here, not in whatever python3 is on PATH
bin=$build/bin
for f in "$bin/fashion_mnist" "$bin/plain_fashion_mnist" "$bin/kolorun"; do
  [ -x "$f" ] || { echo "missing $f: build first (cmake --build $build)" >&2; exit 1; }
done
data=/usr/share/datasets/fashion-mnist
common=(--epochs 1 --max-steps "$max_steps" --batch-size "$batch" --data "$data")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

wants() { [[ ",$only," == *",$1,"* ]]; }
ips() { "$py" -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["images_per_sec"])' "$1"; }
acc() { "$py" -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["test_accuracy"])' "$1"; }

# run NAME COMMAND...: runs it with output in $work/NAME.log, summary in $work/NAME.json.
run() {
  local name=$1; shift
  printf '  %-7s ' "$name" >&2
  local t0=$SECONDS
  if ! "$@" >"$work/$name.log" 2>&1; then
    echo "FAILED; its output:" >&2; cat "$work/$name.log" >&2; exit 1
  fi
  echo "$(ips "$work/$name.json") images/s ($((SECONDS - t0)) s)" >&2
}

round() {
  local r=$1
  echo "round $r: $max_steps steps per worker, batch $batch per worker, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  wants plain && run plain "$bin/plain_fashion_mnist" "${common[@]}" --summary-json "$work/plain.json"
  wants kolo1 && run kolo1 env KOLO_TRANSPORT=local "$bin/fashion_mnist" "${common[@]}" --no-progress \
    --summary-json "$work/kolo1.json"
  wants ddp1 && run ddp1 "$py" bench/ddp_fashion_mnist.py --workers 1 --max-steps "$max_steps" \
    --warmup-steps "$warmup" --batch-size "$batch" --data "$data" --summary-json "$work/ddp1.json"
  # kolo2 runs between its two peers, so that the machine's drift over a round (often
  # 10-15% here) weighs least on the ratios: plain | kolo1, ddp2 | kolo2 | indep2.
  wants ddp2 && run ddp2 "$py" bench/ddp_fashion_mnist.py --workers 2 --max-steps "$max_steps" \
    --warmup-steps "$warmup" --batch-size "$batch" --data "$data" --summary-json "$work/ddp2.json"
  wants kolo2 && run kolo2 "$bin/kolorun" -np 2 "$bin/fashion_mnist" "${common[@]}" --no-progress \
    --summary-json "$work/kolo2.json"
  if wants indep2; then
    printf '  %-7s ' indep2 >&2
    local t0=$SECONDS
    KOLO_TRANSPORT=local "$bin/fashion_mnist" "${common[@]}" --no-progress \
      --summary-json "$work/indep2a.json" >"$work/indep2a.log" 2>&1 &
    local a=$!
    KOLO_TRANSPORT=local "$bin/fashion_mnist" "${common[@]}" --no-progress \
      --summary-json "$work/indep2b.json" >"$work/indep2b.log" 2>&1 &
    local b=$!
    wait "$a" && wait "$b" || { echo "FAILED"; cat "$work"/indep2?.log; exit 1; } >&2
    "$py" - "$work" <<'PY'
import json, sys
w = sys.argv[1]
a, b = (json.load(open(f"{w}/indep2{x}.json")) for x in "ab")
json.dump({"world_size": 2, "images_per_sec": a["images_per_sec"] + b["images_per_sec"],
           "test_accuracy": (a["test_accuracy"] + b["test_accuracy"]) / 2,
           "parts": [a["images_per_sec"], b["images_per_sec"]]}, open(f"{w}/indep2.json", "w"))
PY
    echo "$(ips "$work/indep2.json") images/s ($((SECONDS - t0)) s)" >&2
  fi
  echo "  (load average after the round: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  mkdir -p "$work/r$r"
  for n in plain kolo1 ddp1 kolo2 ddp2 indep2; do
    [ -f "$work/$n.json" ] && mv "$work/$n.json" "$work/r$r/$n.json"
  done
  rm -f "$work"/indep2?.json
  return 0
}

# Every configuration (PyTorch's too) calls BLAS through this one alternative; say which.
echo "BLAS: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)" >&2
for r in $(seq 1 "$repeat"); do round "$r"; done

echo
"$py" - "$work" "$repeat" "$max_steps" "$batch" <<'PY'
import json, os, statistics, sys
work, repeat, steps, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [("plain", "plain libtorch, 1 process"),
        ("kolo1", "kolo, 1 worker (no launcher)"),
        ("ddp1", "PyTorch DDP (Gloo), 1 worker"),
        ("kolo2", "kolo, kolorun -np 2"),
        ("ddp2", "PyTorch DDP (Gloo), 2 workers"),
        ("indep2", "2 independent 1-worker kolo runs (sum)")]
goals = [("kolo2", "ddp2", 1.15), ("kolo2", "indep2", 0.95), ("kolo1", "plain", 0.98)]
rounds = []
for r in range(1, repeat + 1):
    d = {}
    for name, _ in rows:
        p = f"{work}/r{r}/{name}.json"
        if os.path.exists(p):
            d[name] = json.load(open(p))
    rounds.append(d)

def table(d, title):
    print(title)
    print(f"| configuration | images/s | test accuracy |")
    print(f"|---|---:|---:|")
    for name, label in rows:
        if name in d:
            acc = d[name].get("test_accuracy")
            print(f"| {name}: {label} | {d[name]['images_per_sec']:.0f} | "
                  + (f"{acc:.4f}" if acc is not None else "-") + " |")
    print()
    print("| ratio | measured | goal | status |")
    print("|---|---:|---:|---|")
    for a, b, goal in goals:
        if a in d and b in d:
            ratio = d[a]["images_per_sec"] / d[b]["images_per_sec"]
            print(f"| {a}/{b} | {ratio:.3f} | >= {goal} | {'PASS' if ratio >= goal else 'MISS'} |")
    print()

for i, d in enumerate(rounds, 1):
    table(d, f"round {i} of {repeat} ({steps} steps per worker, batch {batch} per worker):")
if repeat > 1:
    med = {}
    for name, _ in rows:
        vals = [d[name]["images_per_sec"] for d in rounds if name in d]
        if vals:
            med[name] = {"images_per_sec": statistics.median(vals), "test_accuracy": None}
    # Ratios of medians; per-round ratios are above.
    table(med, f"medians over {repeat} rounds:")
    # The machine drifts between rounds, so the paired figure is each round's own ratio
    # (its configurations ran minutes apart, not rounds apart): their median and range.
    print(f"per-round ratios over {repeat} rounds (median, min-max):")
    print("| ratio | median | range | goal | status |")
    print("|---|---:|---|---:|---|")
    for a, b, goal in goals:
        ratios = [d[a]["images_per_sec"] / d[b]["images_per_sec"] for d in rounds if a in d and b in d]
        if ratios:
            m = statistics.median(ratios)
            print(f"| {a}/{b} | {m:.3f} | {min(ratios):.3f}-{max(ratios):.3f} | >= {goal} | "
                  f"{'PASS' if m >= goal else 'MISS'} |")
PY
