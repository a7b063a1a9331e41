#!/usr/bin/env bash
# Elastic training through kolorun's elastic driver with the founding example
# (fashion_mnist --elastic), real processes on this host:
#   kill3to2 / kill2to1  kill -9 of one worker mid-epoch: the survivors keep their
#                        processes (same pids), the job finishes, every image of every epoch
#                        was trained on exactly once (kolo_count_samples over --elastic-log),
#                        and the test accuracy is at most 0.01 below an uninterrupted run's;
#   added                a host (127.0.0.1) added by the discovery script mid-training: the
#                        new worker joins at a commit with the others' parameters (the same
#                        checksum after the sync) and the job ends with --max-np workers;
#   sync_fail            a survivor dies inside the sync after a reset: the others re-form
#                        again without it and finish.
# Usage: elastic_job_test.sh MODE KOLORUN FASHION_MNIST COUNT_SAMPLES
set -euo pipefail
mode=$1 kolorun=$2 example=$3 count=$4
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
export KOLO_PEER_TIMEOUT_SECONDS=30 KOLO_STALL_SHUTDOWN_SECONDS=120 OMP_NUM_THREADS=1
# 2 -> 1 trains the rest on one worker: a smaller set keeps the test's time near the others'.
images=12000 epochs=3
[ "$mode" = kill2to1 ] && images=8000
common=(--elastic --epochs "$epochs" --train-limit "$images" --commit-every 10 --batch-size 32
        --no-progress)
field() { tr -d ' \n' <"$2" | sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p"; }
fail() { echo "FAIL: $*"; echo "--- kolorun's output:"; cat "$work/job.log" 2>/dev/null || true; exit 1; }

# The pid of the worker with elastic id $1 (from its log's first line), and whether it lives.
pid_of() { sed -n 's/^start pid \([0-9]*\)$/\1/p' "$work/log.$1" 2>/dev/null | head -1; }
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
# Waits (at most 120 s) until worker $1's log has $2 lines starting with "batch".
wait_batches() {
  for _ in $(seq 1200); do
    local n; n=$(cat "$work/log.$1" 2>/dev/null | grep -c '^batch' || true)
    [ "${n:-0}" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "worker $1 did not train $2 steps"
}

run_job() {  # run_job NAME KOLORUN_ARGS... -- EXAMPLE_ARGS...
  local name=$1; shift
  "$kolorun" "$@" >"$work/$name.log" 2>&1
}

# An uninterrupted run of $1 workers as the accuracy reference.
reference() {
  "$kolorun" --min-np 1 --max-np "$1" -np "$1" "$example" "${common[@]}" \
    --summary-json "$work/ref.json" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }
  field test_accuracy "$work/ref.json"
}

kill_test() {  # kill_test NP
  local np=$1
  local ref; ref=$(reference "$np")
  "$kolorun" --min-np 1 --max-np "$np" -np "$np" "$example" "${common[@]}" \
    --elastic-log "$work/log" --summary-json "$work/run.json" >"$work/job.log" 2>&1 &
  local job=$!
  wait_batches 0 45  # mid-epoch 1 (12000 images / np workers / 32 per step), between commits
  local victim=$((np - 1)) survivors=()
  for ((id = 0; id < np - 1; ++id)); do survivors+=("$(pid_of $id)"); done
  kill -9 "$(pid_of $victim)"
  echo "killed worker $victim (pid $(pid_of $victim)) after $(grep -c '^batch' "$work/log.0") steps of worker 0"
  wait "$job" || fail "kolorun exited with status $?"
  for ((id = 0; id < np - 1; ++id)); do
    grep -q "^done pid ${survivors[$id]}$" "$work/log.$id" ||
      fail "worker $id did not finish in its first process (pid ${survivors[$id]})"
    [ "$(grep -c '^start pid' "$work/log.$id")" = 1 ] || fail "worker $id was started again"
  done
  grep -q "^synced 1 .* $((np - 1)) " "$work/log.0" || fail "no generation 1 of $((np - 1)) workers"
  "$count" "$images" "$epochs" "$work"/log.* || fail "samples trained on twice or never"
  local acc; acc=$(field test_accuracy "$work/run.json")
  echo "test accuracy: $acc with a worker killed, $ref uninterrupted"
  # Not worse by more than 0.01. It may be better: after the kill fewer workers take more
  # (smaller) steps per epoch than the uninterrupted run does.
  awk -v a="$acc" -v r="$ref" 'BEGIN { exit !(a >= r - 0.01) }' ||
    fail "accuracy $acc is more than 0.01 below the uninterrupted run's $ref"
}

case $mode in
  kill3to2) kill_test 3 ;;
  kill2to1) kill_test 2 ;;
  added)
    echo "localhost:2" >"$work/hosts"
    printf '#!/bin/sh\ncat %s\n' "$work/hosts" >"$work/discover.sh"
    chmod +x "$work/discover.sh"
    "$kolorun" --min-np 2 --max-np 3 --host-discovery-script "$work/discover.sh" \
      --discovery-interval 0.2 "$example" "${common[@]}" --elastic-log "$work/log" \
      --summary-json "$work/run.json" >"$work/job.log" 2>&1 &
    job=$!
    wait_batches 0 30
    printf 'localhost:2\n127.0.0.1:1\n' >"$work/hosts"
    wait "$job" || fail "kolorun exited with status $?"
    [ -f "$work/log.2" ] || fail "no worker was started on the added host"
    new_gen=$(sed -n 's/^synced \([0-9]*\) [0-9]* 3 .*/\1/p' "$work/log.2" | head -1)
    [ -n "$new_gen" ] || fail "the new worker never trained in a generation of 3"
    # Every member's parameters right after that generation's sync: one checksum.
    sums=$(grep -h "^synced $new_gen " "$work"/log.* | awk '{print $5}' | sort -u)
    [ "$(echo "$sums" | wc -l)" = 1 ] || fail "generation $new_gen began with different parameters: $sums"
    echo "generation $new_gen: 3 workers began with parameter checksum $sums"
    [ "$(field world_size "$work/run.json")" = 3 ] || fail "the job did not end with 3 workers"
    "$count" "$images" "$epochs" "$work"/log.* || fail "samples trained on twice or never"
    ;;
  sync_fail)
    FASHION_MNIST_TEST_EXIT_IN_SYNC=1 "$kolorun" --min-np 1 --max-np 3 -np 3 "$example" "${common[@]}" \
      --elastic-log "$work/log" --summary-json "$work/run.json" >"$work/job.log" 2>&1 &
    job=$!
    wait_batches 0 30
    kill -9 "$(pid_of 2)"  # the reset after it: worker 1 dies inside the sync
    wait "$job" || fail "kolorun exited with status $?"
    grep -q "^exit in sync" "$work/log.1" || fail "worker 1 did not reach its sync"
    [ "$(field world_size "$work/run.json")" = 1 ] || fail "the job did not end with 1 worker"
    "$count" "$images" "$epochs" "$work"/log.* || fail "samples trained on twice or never"
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
echo "PASS"
