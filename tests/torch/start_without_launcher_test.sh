#!/usr/bin/env bash
# The founding example started without a launcher (issue 13): independent processes that
# meet through TF_CONFIG (workers only; a chief plus workers) or torch-style variables
# (MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE) train exactly as the same job under kolorun
# (same loss, accuracy and weights fingerprint), and a TF_CONFIG worker that never starts
# ends start-up within KOLO_START_TIMEOUT_SECONDS with an error naming it.
# Usage: start_without_launcher_test.sh KOLORUN FASHION_MNIST
set -uo pipefail
kolorun=$1 example=$2
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2> /dev/null; rm -rf "$work"' EXIT
export KOLO_PEER_TIMEOUT_SECONDS=60 OMP_NUM_THREADS=1
# Small Fashion-MNIST-shaped files (tiny_idx.sh): the runs are compared with each other,
# so a few steps of the real CNN on them is enough, and each run takes about a second.
source "$(dirname "$0")/tiny_idx.sh"
tiny_dataset "$work/data" 768 64
args=(--epochs 1 --max-steps 4 --seed 7 --no-progress --data "$work/data")
status=0
fail() { echo "FAIL: $*"; status=1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fingerprint() {  # the summary without its timing
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d.pop("images_per_sec"); print(json.dumps(d, sort_keys=True))' "$1"
}
# wait_all LOGPREFIX N: waits for the background jobs in pids, each bounded by timeout.
wait_all() {
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  pids=()
  return $rc
}

for np in 2 3; do
  timeout 120 "$kolorun" -np $np "$example" "${args[@]}" --summary-json "$work/kolorun$np.json" \
    > "$work/kolorun$np.log" 2>&1 || { cat "$work/kolorun$np.log"; fail "kolorun -np $np"; }
done

# TF_CONFIG, workers only, 2 and 3 workers.
for np in 2 3; do
  hosts=()
  for _ in $(seq $np); do hosts+=("\"127.0.0.1:$(free_port)\""); done
  cluster="{\"worker\":[$(IFS=,; echo "${hosts[*]}")]}"
  for i in $(seq 0 $((np - 1))); do
    TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"worker\",\"index\":$i}}" \
      timeout 120 "$example" "${args[@]}" --summary-json "$work/tf$np.json" \
      > "$work/tf$np.$i.log" 2>&1 &
    pids+=($!)
  done
  wait_all || { cat "$work"/tf$np.*.log; fail "TF_CONFIG with $np workers"; }
  [ "$(fingerprint "$work/tf$np.json")" = "$(fingerprint "$work/kolorun$np.json")" ] ||
    fail "TF_CONFIG with $np workers trained differently from kolorun -np $np:
  $(fingerprint "$work/tf$np.json")
  $(fingerprint "$work/kolorun$np.json")"
done

# TF_CONFIG with a chief and two workers: the chief is rank 0 and hosts the store.
cluster="{\"chief\":[\"127.0.0.1:$(free_port)\"],\"worker\":[\"127.0.0.1:$(free_port)\",\"127.0.0.1:$(free_port)\"]}"
for task in chief:0 worker:0 worker:1; do
  TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"${task%:*}\",\"index\":${task#*:}}}" \
    timeout 120 "$example" "${args[@]}" --summary-json "$work/chief.json" \
    > "$work/chief.$task.log" 2>&1 &
  pids+=($!)
done
wait_all || { cat "$work"/chief.*.log; fail "TF_CONFIG with a chief and 2 workers"; }
[ "$(fingerprint "$work/chief.json")" = "$(fingerprint "$work/kolorun3.json")" ] ||
  fail "chief + 2 workers trained differently from kolorun -np 3"

# torch-style variables, as torchrun sets them.
port=$(free_port)
for r in 0 1; do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
    timeout 120 "$example" "${args[@]}" --summary-json "$work/torch2.json" \
    > "$work/torch2.$r.log" 2>&1 &
  pids+=($!)
done
wait_all || { cat "$work"/torch2.*.log; fail "torch-style variables with 2 workers"; }
[ "$(fingerprint "$work/torch2.json")" = "$(fingerprint "$work/kolorun2.json")" ] ||
  fail "torch-style start trained differently from kolorun -np 2"

# A worker that never starts: start-up ends in the bound, naming it.
p0=$(free_port) p1=$(free_port)
start=$(date +%s)
TF_CONFIG="{\"cluster\":{\"worker\":[\"127.0.0.1:$p0\",\"127.0.0.1:$p1\"]},\"task\":{\"type\":\"worker\",\"index\":0}}" \
  KOLO_START_TIMEOUT_SECONDS=3 timeout 60 "$example" "${args[@]}" > "$work/missing.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$work/missing.log"
[ $rc != 0 ] && [ $rc != 124 ] || fail "a missing worker: exit status $rc (expected an error, not success or a hang)"
grep -q "worker 1 (127.0.0.1:$p1)" "$work/missing.log" || fail "the error does not name worker 1 (127.0.0.1:$p1)"
[ "$took" -le 20 ] || fail "start-up took ${took}s with KOLO_START_TIMEOUT_SECONDS=3"
[ $status = 0 ] && echo PASS
exit $status
