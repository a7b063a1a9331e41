#!/usr/bin/env bash
# allreduce across two "hosts" made of network namespaces (scripts/netns_hosts.sh; root),
# 2 ranks on each: kolo over Gloo started by kolorun's own launcher through a real sshd,
# with the hierarchical transport (shm inside a host, Gloo across) and without it (Gloo
# alone), kolo over MPI (kolorun --mpi, hierarchical) and raw MPI_Allreduce, run one after
# the other; prints algbw per size and the ratios. The hosts share this machine's cores
# and memory, so only the ratios of one run mean anything (docs/benchmarks.md).
#
#   bench/netns_compare.sh [--build-dir build] [--max-bytes 67108864]
#
# Builds nothing: expects kolorun, kolo_bench and kolo_peer_mpi_allreduce in BUILD/bin.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
build="$root/build" max_bytes=$((64 << 20))
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$(realpath "$2"); shift 2 ;;
    --max-bytes) max_bytes=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bin=$build/bin
hosts=$root/scripts/netns_hosts.sh
out=$(mktemp -d)
"$hosts" down > /dev/null 2>&1 || true
"$hosts" up 2
trap '"$hosts" down > /dev/null 2>&1; rm -rf "$out"' EXIT
"$hosts" sshd 2 "$out/keys"
sweep=(--min-bytes 1024 --max-bytes "$max_bytes" --step 4)
H=10.77.0.1:2,10.77.0.2:2
export OMP_NUM_THREADS=1
run() {  # run NAME ENV... -- CMD...
  local name=$1
  shift
  echo "== $name" >&2
  "$@" > "$out/$name.log" 2>&1 || { cat "$out/$name.log" >&2; exit 1; }
}
run kolo_gloo_hier env KOLO_HIERARCHICAL=1 "$hosts" run "$bin/kolorun" --ssh-config \
  "$out/keys/ssh_config" -np 4 -H $H "$bin/kolo_bench" allreduce "${sweep[@]}" --json "$out/kolo_gloo_hier.json"
run kolo_gloo env KOLO_HIERARCHICAL=0 "$hosts" run "$bin/kolorun" --ssh-config \
  "$out/keys/ssh_config" -np 4 -H $H "$bin/kolo_bench" allreduce "${sweep[@]}" --json "$out/kolo_gloo.json"
run kolo_mpi_hier env KOLO_HIERARCHICAL=1 "$hosts" run "$bin/kolorun" --mpi -np 4 -H $H \
  "$bin/kolo_bench" allreduce "${sweep[@]}" --json "$out/kolo_mpi_hier.json"
run mpi "$hosts" run mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 -H $H \
  "$bin/kolo_peer_mpi_allreduce" "${sweep[@]}" --json "$out/mpi.json"
python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
names = ["kolo_gloo_hier", "kolo_gloo", "kolo_mpi_hier", "mpi"]
runs = {n: {r["bytes"]: r["algbw_gbps"] for r in json.load(open(os.path.join(d, n + ".json")))} for n in names}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"allreduce across 2 namespace hosts x 2 ranks, algbw GB/s ({cpu})")
print("%10s %15s %10s %14s %8s %16s %12s" % ("bytes", "kolo gloo+hier", "kolo gloo", "kolo mpi+hier",
                                           "mpi", "gloo+hier / mpi", "gloo / mpi"))
for b in sorted(runs["mpi"]):
    v = [runs[n].get(b) for n in names]
    print("%10d %15.3f %10.3f %14.3f %8.3f %16.2f %12.2f" % (b, *v, v[0] / v[3], v[1] / v[3]))
PY
