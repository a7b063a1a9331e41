#!/usr/bin/env bash
# Start-up cost of a job of N local workers that do init, one barrier and shutdown:
# kolorun (its own launcher, Gloo), kolorun --mpi (mpirun, MPI) and torch.distributed
# (init_process_group gloo from torch-style variables, as torchrun starts it; see
# peers/torch_barrier.py for why not torchrun itself), interleaved, R runs each; prints
# the median wall time of each and the ratios (docs/benchmarks.md, "Start-up").
#
#   bench/startup.sh [--build-dir build] [--np 4] [--repeat 10]
#
# Builds nothing: expects kolorun and kolo_barrier in BUILD/bin (cmake --build BUILD
# --target kolorun kolo_barrier); installs /usr/bin/python3 with torch when missing
# (scripts/setup.sh --bench).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
build="$root/build" np=4 repeat=10
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$(realpath "$2"); shift 2 ;;
    --np) np=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bin=$build/bin
for f in kolorun kolo_barrier; do
  [ -x "$bin/$f" ] || { echo "missing $bin/$f: cmake --build $build --target $f" >&2; exit 1; }
done
/usr/bin/python3 -c 'import torch' 2> /dev/null || "$root/scripts/setup.sh" --bench
export OMP_NUM_THREADS=1
run_timed() {  # prints the wall seconds of "$@", or fails
  local t0
  t0=$(date +%s%N)
  "$@" > /dev/null 2>&1 || { echo "failed: $*" >&2; return 1; }
  echo "$(( $(date +%s%N) - t0 ))e-9"
}
declare -A times
for _ in $(seq "$repeat"); do
  times[kolorun]+="$(run_timed "$bin/kolorun" -np "$np" "$bin/kolo_barrier") "
  times[mpirun]+="$(run_timed "$bin/kolorun" --mpi -np "$np" "$bin/kolo_barrier") "
  times[torchrun]+="$(run_timed /usr/bin/python3 "$here/peers/torch_barrier.py" -np "$np") "
done
/usr/bin/python3 - "$np" "$repeat" "${times[kolorun]}" "${times[mpirun]}" "${times[torchrun]}" <<'PY'
import statistics, sys, platform
np_, repeat = sys.argv[1], sys.argv[2]
names = ["kolorun (own launcher, gloo)", "kolorun --mpi (mpirun, mpi)", "torch.distributed gloo (env://)"]
med = [statistics.median(float(x) for x in s.split()) for s in sys.argv[3:6]]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"start-up, {np_} local workers, init + barrier + shutdown, median of {repeat} ({cpu})")
for n, m in zip(names, med):
    print(f"  {n:36s} {m * 1000:8.0f} ms")
print(f"  mpirun / kolorun   {med[1] / med[0]:.2f}x")
print(f"  torch / kolorun     {med[2] / med[0]:.2f}x")
PY
