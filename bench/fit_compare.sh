#!/usr/bin/env bash
# kolo_train's fit against its peers on this host: examples/keras_mnist.cc's model
# (Dense(64, relu, 784) + Dense(10), Adam(0.001, eps 1e-7), cross-entropy from logits,
# GLOBAL batch 32) on the real Fashion-MNIST, 1 epoch, in four configurations:
#
#   loop2      kolorun -np 2 mlp_loop: the same training as a hand-written libtorch loop
#              with kolo::DistributedOptimizer (bench/mlp_loop.cc), 16 of every 32 each
#   fit2       kolorun -np 2 keras_mnist --strategy multiworker
#   mirrored   keras_mnist --strategy mirrored --devices cpu:0,cpu:1 (2 replicas, 1 process)
#   ddp2       PyTorch DDP (Gloo), 2 processes started by bench/peers/ddp_mlp.py
#
# and the goals: fit2/loop2 >= 0.98 (fit's own cost), mirrored/fit2 >= 0.95, fit2/ddp2
# >= 1.5. images/s = every worker's training images / the chief's (rank 0's) wall time of
# the epoch's training (keras_mnist's --summary-json images_per_sec; the peers time
# the same span: the epoch's permutation and every step, the first one included; no
# start-up, no evaluation). Every configuration runs the same steps on the same images
# and the same threads per worker (--threads, default cores / 2: OMP_NUM_THREADS for the
# kolorun jobs, whose shims keep it; mirrored gives each replica cores / replicas; DDP
# torch.set_num_threads). keras_mnist runs with --verbose 0 (no progress bar).
#
# Usage: bench/fit_compare.sh [--repeat N] [--steps-per-epoch N] [--batch-size N]
#                             [--threads N] [--build DIR] [--only LIST] [--out DIR]
#   --repeat N (default 3): every configuration N times, interleaved round by round;
#     the table shows medians, the ratios of the medians and of each round (the paired
#     figure on a machine that drifts).
#   --steps-per-epoch N: N steps of the epoch (default: the whole epoch, 1875 steps).
#   --only loop2,fit2,... runs a subset (a ratio needs both of its configurations).
#   --out DIR keeps the logs and JSON results (default: a temporary folder, deleted).
# Builds nothing: expects BUILD/bin (default build/bin) to hold kolorun, keras_mnist and
# mlp_loop (cmake --build build --target kolorun keras_mnist mlp_loop). The DDP peer needs
# /usr/bin/python3 with torch (scripts/setup.sh --bench, called here, installs it when
# missing); without it ddp2 is skipped and said so. A benchmark, not a test: it exits 0
# unless a configuration fails to run. KOLO_* variables in the environment reach every
# kolo run.
set -euo pipefail
cd "$(dirname "$0")/.."

repeat=3 steps=-1 batch=32 build=build only="loop2,fit2,mirrored,ddp2" out=""
# (nproc itself answers OMP_NUM_THREADS when that is set)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
threads=$((cores / 2))
((threads >= 1)) || threads=1
while [ $# -gt 0 ]; do
  case $1 in
    --repeat) repeat=$2; shift 2 ;;
    --steps-per-epoch) steps=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fit_compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

bin=$build/bin
for f in kolorun keras_mnist mlp_loop; do
  [ -x "$bin/$f" ] || { echo "fit_compare.sh: missing $bin/$f; build it first (see --help)" >&2; exit 1; }
done
py=/usr/bin/python3  # Debian's python3-torch lives here, not in whatever python3 is on PATH
wants() { [[ ",$only," == *",$1,"* ]]; }
if wants ddp2; then
  scripts/setup.sh --bench || true
  if ! "$py" -c 'import torch.distributed, numpy' 2>/dev/null; then
    echo "fit_compare.sh: $py cannot import torch.distributed and numpy (Debian: python3-torch," \
         "python3-numpy): ddp2 skipped" >&2
    only=${only//ddp2/}
  fi
fi
if [ -z "$out" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
else
  mkdir -p "$out"
  work=$(cd "$out" && pwd)
fi
data=/usr/share/datasets/fashion-mnist
common=(--epochs 1 --steps-per-epoch "$steps" --batch-size "$batch" --data "$data")
export OMP_NUM_THREADS=$threads

# What else runs here: the busiest processes other than this script's (ps, 1 s sample).
busy() {
  top -b -n 2 -d 1 -w 200 2>/dev/null | awk '/^top -/{n++} n==2 && $1 ~ /^[0-9]+$/ && $9+0 >= 10 {
    printf "%s %s%%cpu; ", $12, $9 }' || true
}

# run NAME COMMAND...: output in $work/NAME.rR.log; the JSON result in $work/NAME.rR.json.
run() {
  local name=$1 r=$2; shift 2
  local log=$work/$name.r$r.log json=$work/$name.r$r.json
  printf '  %-9s ' "$name" >&2
  local t0=$SECONDS
  if ! "$@" >"$log" 2>&1; then
    echo "FAILED; its output:" >&2; cat "$log" >&2; exit 1
  fi
  # keras_mnist writes its --summary-json; the peers print one JSON line (kolorun prefixes
  # it with the rank).
  [ -f "$json" ] || "$py" - "$log" "$json" <<'PY'
import json, sys
lines = [l[l.index("{"):] for l in open(sys.argv[1]) if '"images_per_sec"' in l]
if not lines:
    sys.exit(f"no JSON result line in {sys.argv[1]}")
json.dump(json.loads(lines[-1]), open(sys.argv[2], "w"))
PY
  "$py" - "$json" "$((SECONDS - t0))" <<'PY' >&2
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{d['images_per_sec']:8.0f} images/s  test accuracy {d['test_accuracy']:.4f}  "
      f"train loss {d['train_loss']:.4f}  ({sys.argv[2]} s)")
PY
}

round() {
  local r=$1
  echo "round $r of $repeat: load average $(cut -d' ' -f1-3 /proc/loadavg); busy: $(busy)" >&2
  # fit2 runs between its two kolo peers, so that the machine's drift weighs least on the
  # ratios; ddp2 last (its ratio is the one with the widest margin).
  wants loop2 && run loop2 "$r" "$bin/kolorun" -np 2 "$bin/mlp_loop" "${common[@]}"
  wants fit2 && run fit2 "$r" "$bin/kolorun" -np 2 "$bin/keras_mnist" --strategy multiworker \
    "${common[@]}" --verbose 0 --summary-json "$work/fit2.r$r.json"
  wants mirrored && run mirrored "$r" "$bin/keras_mnist" --strategy mirrored --devices cpu:0,cpu:1 \
    "${common[@]}" --verbose 0 --summary-json "$work/mirrored.r$r.json"
  wants ddp2 && run ddp2 "$r" "$py" bench/peers/ddp_mlp.py --workers 2 --threads "$threads" \
    "${common[@]}"
  echo "  (load average after the round: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  return 0
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
{
  echo "date: $(date -Is)"
  echo "CPU: $cpu, $cores CPUs; $threads intra-op thread(s) per worker/replica"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo none)," \
       "$(git status --porcelain -uno 2>/dev/null | grep -c . || true) modified tracked files"
  echo "BLAS: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)"
  echo "env: $(env | grep '^KOLO_' | tr '\n' ' ')"
  echo "args: repeat=$repeat steps_per_epoch=$steps batch=$batch (global) only=$only"
} >&2
for r in $(seq 1 "$repeat"); do round "$r"; done

echo
"$py" - "$work" "$repeat" "$cpu ($cores CPUs)" "$threads" "$batch" "$steps" <<'PY'
import json, os, statistics, sys
work, repeat, cpu, threads, batch, steps = sys.argv[1:7]
repeat = int(repeat)
rows = [("loop2", "hand-written loop + DistributedOptimizer, kolorun -np 2"),
        ("fit2", "fit, MultiWorkerMirroredStrategy, kolorun -np 2"),
        ("mirrored", "fit, MirroredStrategy cpu:0,cpu:1, 1 process"),
        ("ddp2", "PyTorch DDP (Gloo), 2 processes")]
goals = [("fit2", "loop2", 0.98), ("mirrored", "fit2", 0.95), ("fit2", "ddp2", 1.5)]
res = {name: [json.load(open(p)) for r in range(1, repeat + 1)
              if os.path.exists(p := f"{work}/{name}.r{r}.json")] for name, _ in rows}
ips = {n: [d["images_per_sec"] for d in v] for n, v in res.items() if v}
print(f"CPU: {cpu}; {threads} thread(s) per worker; global batch {batch}; "
      f"{'1 epoch' if int(steps) < 0 else steps + ' steps'}; medians of {repeat}")
print()
print("| configuration | images/s (median) | rounds | test accuracy | train loss |")
print("|---|---:|---|---:|---:|")
for name, label in rows:
    if name in ips:
        last = res[name][-1]
        print(f"| {name}: {label} | {statistics.median(ips[name]):.0f} | "
              f"{', '.join(f'{v:.0f}' for v in ips[name])} | {last['test_accuracy']:.4f} | "
              f"{last['train_loss']:.4f} |")
print()
print("| goal | ratio of medians | per-round ratios | goal | status |")
print("|---|---:|---|---:|---|")
for a, b, goal in goals:
    if a in ips and b in ips:
        ratio = statistics.median(ips[a]) / statistics.median(ips[b])
        per = [x / y for x, y in zip(ips[a], ips[b])]
        print(f"| {a}/{b} | {ratio:.3f} | {', '.join(f'{p:.3f}' for p in per)} | >= {goal} | "
              f"{'met' if ratio >= goal else 'MISSED'} |")
PY
