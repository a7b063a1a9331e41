#!/usr/bin/env bash
# kolo_train_worker's equivalence on 2 workers started as torchrun would (MASTER_ADDR,
# MASTER_PORT, RANK, WORLD_SIZE; no launcher): MultiWorkerMirroredStrategy meets through
# rank 0's store and trains as one replica does.
# Usage: torch_style_test.sh KOLO_TRAIN_WORKER
set -uo pipefail
worker=$1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pids=()
for r in 0 1; do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 OMP_NUM_THREADS=1 \
    timeout 120 "$worker" equivalence cpu:0,cpu:1 > "$work/$r.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
cat "$work"/*.log
oks=$(cat "$work"/*.log | grep -c "equivalence .* OK")
[ $status = 0 ] && [ "$oks" = 4 ] && echo PASS || echo "FAIL: status $status, $oks of 4 OK lines"
