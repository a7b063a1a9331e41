#!/usr/bin/env bash
# Parameter-server jobs through kolorun --ps (tests/ps/ps_job.cc says what each mode checks).
#   ps_job_test.sh MODE KOLORUN PS_JOB
# Prints PASS or FAIL: lines (ctest reads them).
set -uo pipefail
mode=$1 kolorun=$2 job=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
log=$dir/log

# The pid a task printed as "<type> <index> pid N" (kolorun prefixes "[type:index] ").
pid_of() {
  local what=$1
  for _ in $(seq 1 600); do
    local p
    p=$(sed -n "s/.*\] $what pid \([0-9]*\).*/\1/p" "$log" | tail -1)
    if [ -n "$p" ]; then echo "$p"; return 0; fi
    sleep 0.1
  done
  return 1
}
wait_for() {  # a line in the log, bounded
  for _ in $(seq 1 900); do grep -q "$1" "$log" && return 0; sleep 0.1; done
  return 1
}

case $mode in
  sync_sgd|sync_adam)
    "$kolorun" --ps 2 -np 2 "$job" sync "${mode#sync_}" >"$log" 2>&1
    status=$?
    cat "$log"
    [ $status -eq 0 ] && grep -q "PASS sync" "$log" && echo PASS || echo "FAIL: status $status"
    ;;
  sync3)
    "$kolorun" --ps 1 -np 3 "$job" sync sgd >"$log" 2>&1
    status=$?
    cat "$log"
    [ $status -eq 0 ] && grep -q "PASS sync" "$log" && echo PASS || echo "FAIL: status $status"
    ;;
  backup)
    "$kolorun" --ps 1 -np 3 "$job" backup >"$log" 2>&1
    status=$?
    cat "$log"
    [ $status -eq 0 ] && grep -q "PASS backup" "$log" && echo PASS || echo "FAIL: status $status"
    ;;
  sparse)
    "$kolorun" --ps 2 -np 2 "$job" sparse >"$log" 2>&1
    status=$?
    cat "$log"
    [ $status -eq 0 ] && grep -q "PASS sparse" "$log" && echo PASS || echo "FAIL: status $status"
    ;;
  fit_loop)
    "$kolorun" --ps 1 -np 2 "$job" fit_loop >"$log" 2>&1
    status=$?
    cat "$log"
    [ $status -eq 0 ] && grep -q "PASS fit_loop" "$log" && echo PASS || echo "FAIL: status $status"
    ;;
  faults)
    "$kolorun" --ps 1 -np 2 --max-restarts 1 "$job" faults 300 >"$log" 2>&1 &
    launcher=$!
    pid=$(pid_of "worker 1") || { cat "$log"; echo "FAIL: worker 1 never started"; exit 0; }
    sleep 2
    kill -9 "$pid"
    wait $launcher
    status=$?
    cat "$log"
    grep -q "was killed by signal 9" "$log" || echo "FAIL: kolorun did not report the kill"
    [ $status -eq 0 ] && grep -q "PASS faults" "$log" && echo PASS || echo "FAIL: status $status"
    ;;
  ps_kill)
    export KOLO_PEER_TIMEOUT_SECONDS=5
    "$kolorun" --ps 2 -np 2 "$job" checkpoint "$dir" >"$log" 2>&1 &
    launcher=$!
    pid=$(pid_of "ps 1") || { cat "$log"; echo "FAIL: ps 1 never started"; exit 0; }
    wait_for checkpointed || { cat "$log"; echo "FAIL: no checkpoint"; kill $launcher; exit 0; }
    kill -9 "$pid"
    t0=$(date +%s%N)
    wait $launcher
    status=$?
    took_ms=$((($(date +%s%N) - t0) / 1000000))
    cat "$log"
    echo "the chief ended $took_ms ms after the ps task was killed (bound: 5 s + a step)"
    [ $status -eq 3 ] || echo "FAIL: status $status, not the chief's 3"
    grep -q "chief: .*/job:ps/replica:0/task:1" "$log" || echo "FAIL: the chief's error does not name the dead ps task"
    grep -q "full disk: refused, the previous checkpoint kept" "$log" || echo "FAIL: the full-disk save"
    # 5 s to notice, then its exit: about 5.5 s here (8.3 s before a dead task's stop and a
    # dropped stop reply each held the exit for 3 s).
    [ "$took_ms" -lt 7500 ] || echo "FAIL: the chief took $took_ms ms"
    unset KOLO_PEER_TIMEOUT_SECONDS
    # A new job restores the chief's last checkpoint.
    "$kolorun" --ps 2 -np 2 "$job" restore "$dir" >"$log" 2>&1
    status=$?
    cat "$log"
    [ $status -eq 0 ] && grep -q "PASS restore" "$log" && echo PASS || echo "FAIL: restore status $status"
    ;;
  chief_dies)
    # No launcher: TF_CONFIG tasks started by hand. The chief is killed (-9); the worker and
    # the ps task, never told to stop, end on their own within KOLO_PEER_TIMEOUT_SECONDS
    # of the chief's last heartbeat, naming it.
    port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
    cluster="{\"chief\":[\"127.0.0.1:$(port)\"],\"worker\":[\"127.0.0.1:$(port)\"],\"ps\":[\"127.0.0.1:$(port)\"]}"
    export KOLO_PEER_TIMEOUT_SECONDS=3 KOLO_RENDEZVOUS_SECRET=test-secret
    pids=()
    for task in ps:0 worker:0 chief:0; do
      TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"${task%:*}\",\"index\":0}}" \
        "$job" checkpoint "$dir" >"$dir/$task.log" 2>&1 &
      pids+=($!)
    done
    sleep 4
    kill -9 "${pids[2]}"
    t0=$(date +%s%N)
    for i in 0 1; do wait "${pids[$i]}"; echo "task $i exited with status $?"; done
    took_ms=$((($(date +%s%N) - t0) / 1000000))
    cat "$dir"/*.log
    echo "the worker and the ps task ended $took_ms ms after the chief was killed"
    grep -q "the chief /job:chief/replica:0/task:0 has not been heard from in 3 s" "$dir/worker:0.log" ||
      echo "FAIL: the worker did not name the lost chief"
    grep -q "the chief /job:chief/replica:0/task:0 has not been heard from in 3 s" "$dir/ps:0.log" ||
      echo "FAIL: the ps task did not name the lost chief"
    [ "$took_ms" -lt 10000 ] && echo PASS || echo "FAIL: they took $took_ms ms"
    ;;
  *) echo "FAIL: unknown mode $mode"; exit 2 ;;
esac
