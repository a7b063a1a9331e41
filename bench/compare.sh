#!/usr/bin/env bash
# Runs kolo_bench against its peers back to back on this machine and prints one report:
# per rank count a table of allreduce algbw (kolo under kolorun: Gloo with shared memory,
# and Gloo alone with KOLO_SHM=0; MPI_Allreduce under mpirun; torch.distributed Gloo), the memory-bandwidth probe and the shared-memory bound derived
# from it, kolo_bench gradients (ResNet-50, BERT-base) and latency at 2 ranks, and the
# goals of docs/benchmarks.md.
#
#   bench/compare.sh [--build-dir build] [--ranks "2 4"] [--max-bytes 268435456]
#                    [--repeat 1] [--quick] [--only stream,allreduce,gradients,latency]
#                    [--out DIR]
#
# Builds nothing: expects kolorun, kolo_bench, kolo_peer_mpi_allreduce and kolo_peer_stream
# in BUILD/bin (cmake --build BUILD --target kolorun kolo_bench kolo_peer_mpi_allreduce
# kolo_peer_stream); installs /usr/bin/python3 with torch when missing (scripts/setup.sh
# --bench). The environment passes through to every program (e.g. KOLO_SHM=0
# bench/compare.sh). With --repeat R each sweep runs R times,
# interleaved (kolo, mpi, gloo, kolo, ...), and the tables show per-size medians.
# --quick: 4 B..64 MiB in x4 steps, 1 repeat, 256 MiB stream arrays, fewer gradient steps.
# Results (JSON per run, logs, summary.json) go to --out, default bench/results/<time>/
# (bench/results/ ignores its own contents).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
build="$root/build"
ranks="2 4"
max_bytes=$((256 << 20))
step=2
repeat=1
quick=0
out=""
stream_mib=1024
grad_iters=10
only="stream,allreduce,gradients,latency"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$(cd "$2" && pwd)"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --max-bytes) max_bytes="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --out) out="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ $quick == 1 ]]; then
  max_bytes=$((64 << 20)); step=4; stream_mib=256; grad_iters=3
fi

bin="$build/bin"
for p in kolorun kolo_bench kolo_peer_mpi_allreduce kolo_peer_stream; do
  [[ -x "$bin/$p" ]] || { echo "compare.sh: $bin/$p not found; build it first (see --help)" >&2; exit 1; }
done
"$root/scripts/setup.sh" --bench  # python3-torch (the Gloo peer), installed when missing
python=/usr/bin/python3
"$python" -c 'import torch.distributed' 2>/dev/null ||
  { echo "compare.sh: $python cannot import torch.distributed (Debian: python3-torch)" >&2; exit 1; }

if [[ -z "$out" ]]; then
  mkdir -p "$here/results"
  echo '*' > "$here/results/.gitignore"
  out="$here/results/$(date +%Y%m%d-%H%M%S)"
fi
mkdir -p "$out"
log="$out/log.txt"
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
sweep=(--min-bytes 4 --max-bytes "$max_bytes" --step "$step")

run() {  # run NAME CMD...: logs the command and its output; a failure stops the script
  local name="$1"; shift
  echo "== $name: $* (load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$log"
  "$@" >> "$log" 2>&1 || { echo "compare.sh: $name failed; see $log" >&2; tail -20 "$log" >&2; exit 1; }
}

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)"
  echo "build: $build (source $src, git $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo none)," \
       "$(git -C "$src" status --porcelain -uno 2>/dev/null | grep -c . || true) modified tracked files)"
  echo "env: $(env | grep '^KOLO_' | tr '\n' ' ')"
  echo "args: ranks=[$ranks] max_bytes=$max_bytes step=$step repeat=$repeat quick=$quick"
} | tee "$log"

want() { [[ ",$only," == *",$1,"* ]]; }

if want stream; then
  run stream "$bin/kolo_peer_stream" --mib "$stream_mib" --json "$out/stream.json"
fi
if want allreduce; then
  for n in $ranks; do
    for r in $(seq 1 "$repeat"); do
      run "kolo np$n r$r" "$bin/kolorun" -np "$n" "$bin/kolo_bench" allreduce "${sweep[@]}" \
        --json "$out/kolo_np${n}_r$r.json"
      # kolo over Gloo alone (no shared memory), the same library torch.distributed uses.
      run "kolo-gloo np$n r$r" env KOLO_SHM=0 "$bin/kolorun" -np "$n" "$bin/kolo_bench" allreduce \
        "${sweep[@]}" --json "$out/kologloo_np${n}_r$r.json"
      run "mpi np$n r$r" "${mpirun[@]}" -np "$n" "$bin/kolo_peer_mpi_allreduce" "${sweep[@]}" \
        --json "$out/mpi_np${n}_r$r.json"
      run "gloo np$n r$r" "$python" "$here/peers/torch_allreduce.py" -np "$n" "${sweep[@]}" \
        --json "$out/gloo_np${n}_r$r.json"
    done
  done
fi
for r in $(seq 1 "$repeat"); do
  if want gradients; then
    for model in resnet50 bert-base; do
      run "gradients $model r$r" "$bin/kolorun" -np 2 "$bin/kolo_bench" gradients \
        --model "$model" --iters "$grad_iters" --json "$out/gradients_${model}_r$r.json"
      run "gradients-gloo $model r$r" env KOLO_SHM=0 "$bin/kolorun" -np 2 "$bin/kolo_bench" \
        gradients --model "$model" --iters "$grad_iters" --json "$out/gradientsgloo_${model}_r$r.json"
    done
  fi
  if want latency; then
    run "latency r$r" "$bin/kolorun" -np 2 "$bin/kolo_bench" latency \
      --json "$out/latency_np2_r$r.json"
  fi
done

echo
"$python" "$here/peers/summarize.py" "$out" | tee "$out/summary.txt"
echo
echo "results: $out"
