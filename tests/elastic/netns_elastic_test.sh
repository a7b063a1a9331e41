#!/usr/bin/env bash
# Elastic jobs across two "hosts" made of network namespaces (scripts/netns_hosts.sh):
# kolorun on host 1 (10.77.0.1), the workers of host 2 (10.77.0.2) started through a real
# sshd there, every worker kolo_elastic_core_worker (each step an allreduce checked against
# the generation's size; a hosts_updated check every 5 steps):
#   kill     2 + 2 workers, kill -9 of one on host 2: the three others (on both hosts) keep
#            their processes and go on in a generation of 3 with correct sums; kolorun names
#            the dead worker with its host and blacklists that host; the job ends 0;
#   added    the discovery script starts with 10.77.0.1:2, then lists 10.77.0.2:1 too: a
#            worker starts there through ssh, joins at the next hosts_updated check (from
#            the survivors' step) and the job ends with 3 workers;
#   removed  the script drops 10.77.0.2: its worker finds itself out of the plan and exits
#            0, no failure, no blacklisting, the job ends with the other two.
# And with the founding example (mode fashion_mnist): fashion_mnist --elastic on 2 + 2
# workers, kill -9 of one on host 2 mid-epoch: the survivors finish in their processes,
# every image of every epoch is trained on once (kolo_count_samples), and the test
# accuracy is at most 0.01 below an uninterrupted run's.
# Every wait is bounded (timeout for kolorun, counted loops for the logs). Skipped (exit 77)
# where namespaces cannot be made or sshd is missing.
#
#   netns_elastic_test.sh core KOLORUN CORE_WORKER
#   netns_elastic_test.sh fashion_mnist KOLORUN FASHION_MNIST COUNT_SAMPLES
set -uo pipefail
mode=$1 kolorun=$2 worker=$3 count=${4:-}
hosts=$(dirname "$0")/../../scripts/netns_hosts.sh
if [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null || ! command -v unshare > /dev/null ||
  [ ! -x /usr/sbin/sshd ] || ! command -v ssh > /dev/null; then
  echo "skipped: needs root, ip, unshare, ssh and sshd (openssh-server)"
  exit 77
fi
"$hosts" down > /dev/null 2>&1
if ! "$hosts" up 2 > /dev/null 2>&1; then
  "$hosts" down > /dev/null 2>&1
  echo "skipped: cannot create network namespaces here"
  exit 77
fi
work=$(mktemp -d)
log=$work/job.log
job=
trap '[ -n "$job" ] && kill "$job" 2> /dev/null; wait; "$hosts" down > /dev/null 2>&1; rm -rf "$work"' EXIT
"$hosts" sshd 2 "$work/keys" || { echo "FAIL: cannot start sshd on host 2"; exit 1; }
printf '#!/bin/sh\ncat %s\n' "$work/hosts" > "$work/discover.sh"
chmod +x "$work/discover.sh"
check=5  # the workers' hosts_updated check: every 5 steps
host2_net=$(stat -L -c %i /run/netns/kolo-h2)
status=0
bad() { echo "FAIL: $*"; status=1; }

start() {  # start KOLORUN_ARGS... -- STEPS: kolorun on host 1 in the background (120 s at most)
  local args=()
  while [ "$1" != -- ]; do args+=("$1"); shift; done
  KOLO_LOG_LEVEL=info KOLO_PEER_TIMEOUT_SECONDS=20 OMP_NUM_THREADS=1 timeout 120 \
    "$hosts" run "$kolorun" --ssh-config "$work/keys/ssh_config" "${args[@]}" \
    "$worker" "$2" 100 "$check" > "$log" 2>&1 &
  job=$!
}
finish() {  # waits for kolorun; its status
  wait "$job"
  local rc=$?
  job=
  cat "$log"
  return $rc
}
# wait_for PATTERN N: until the log has N lines matching PATTERN (at most 30 s).
wait_for() {
  for _ in $(seq 300); do
    [ "$(grep -c -- "$1" "$log")" -ge "$2" ] && return 0
    sleep 0.1
  done
  bad "no $2 lines '$1' within 30 s"
  return 1
}
# The pid and steps that generation $1's rank $2 printed.
pid_of() { grep -m1 "] gen $1 rank $2 size" "$log" | sed 's/.* pid \([0-9]*\) .*/\1/'; }
steps_of() { grep "] gen $1 rank $2 size" "$log" | sed 's/.* step \([0-9]*\) .*/\1/'; }
on_host2() { [ "$(readlink "/proc/$1/ns/net" 2> /dev/null)" = "net:[$host2_net]" ]; }
has() {  # has PATTERN [WHAT IS WRONG]
  local what=${2:-}
  [ -n "$what" ] || what="no line '$1' in the output"
  grep -q -- "$1" "$log" || bad "$what"
}
# Every step line is right (ok 1), and generation $1's ranks 0..$2-1 all said size $2.
sums_ok() {
  ! grep -q ' ok 0 ' "$log" || bad "a wrong sum"
  for ((r = 0; r < $2; ++r)); do
    [ -n "$(pid_of "$1" $r)" ] || bad "no step of generation $1 on rank $r"
  done
  ! grep "] gen $1 rank" "$log" | grep -qv " size $2 " || bad "generation $1 is not of size $2"
}
# Generation $1's rank $2 and generation $3's rank $4 are one process.
same_process() {
  local a b
  a=$(pid_of "$1" "$2") b=$(pid_of "$3" "$4")
  [ -n "$a" ] && [ "$a" = "$b" ] ||
    bad "rank $4 of generation $3 (pid ${b:-none}) is not rank $2 of generation $1 (pid ${a:-none})"
}

core() {
  local victim after at r
  echo "=== kill: kill -9 of a worker on host 2 (2 + 2 workers -> 3)"
  start --min-np 2 --max-np 4 -H 10.77.0.1:2,10.77.0.2:2 -- 60
  if wait_for "] gen 0 rank 3 size 4 step 10 " 1 && wait_for "] gen 0 rank 2 size 4 step 10 " 1; then
    victim=$(pid_of 0 3)
    on_host2 "$victim" || bad "rank 3 (pid $victim) does not run on host 2"
    on_host2 "$(pid_of 0 2)" || bad "rank 2 does not run on host 2"
    ! on_host2 "$(pid_of 0 0)" || bad "rank 0 runs on host 2"
    kill -9 "$victim"
  fi
  finish || bad "kolorun exited with status $? (expected 0)"
  has "kolorun: rank 3 (host 10.77.0.2) was killed by signal 9"
  has "kolorun: host 10.77.0.2 is blacklisted"
  has "generation 1 (rank 3 (id 3) failed): 3 workers: id 0 on 10.77.0.1, id 1 on 10.77.0.1, id 2 on 10.77.0.2"
  sums_ok 1 3
  for r in 0 1 2; do same_process 0 $r 1 $r; done
  [ "$(grep -c '] done pid' "$log")" = 3 ] || bad "not 3 workers done"

  echo "=== added: the discovery script adds 10.77.0.2:1 (no --rendezvous-addr)"
  echo "10.77.0.1:2" > "$work/hosts"
  start --min-np 2 --max-np 3 --discovery-interval 0.5 --host-discovery-script "$work/discover.sh" -- 80
  if wait_for "] gen 0 rank 1 size 2 step 10 " 1; then
    printf '10.77.0.1:2\n10.77.0.2:1\n' > "$work/hosts"
    wait_for "] gen 1 rank 2 size 3 " 1 && { on_host2 "$(pid_of 1 2)" || bad "the new worker does not run on host 2"; }
  fi
  finish || bad "kolorun exited with status $? (expected 0)"
  has "generation 1 (the hosts changed): 3 workers: id 0 on 10.77.0.1, id 1 on 10.77.0.1, id 2 on 10.77.0.2"
  sums_ok 1 3
  for r in 0 1; do same_process 0 $r 1 $r; done
  # It joined at the first check after the plan: rank 0 did at most `check` steps (one more
  # line may have been in the pipe) between kolorun's new plan and its "hosts updated".
  after=$(sed -n '/kolorun: generation 1 /,/^\[0\] hosts updated/p' "$log" | grep -c '^\[0\] gen 0 ')
  [ "$after" -le $((check + 1)) ] || bad "rank 0 did $after steps after the new plan before joining it"
  at=$(sed -n 's/^\[0\] hosts updated at step \([0-9]*\)$/\1/p' "$log")
  [ -n "$at" ] && [ $((at % check)) = 0 ] || bad "rank 0 did not leave at a check (step '${at}')"
  for r in 0 1 2; do  # everyone, the new worker too, goes on from the survivors' step
    [ "$(steps_of 1 $r | head -1)" = "$at" ] || bad "rank $r's first step of generation 1 is not $at"
  done
  [ "$(grep -c '] done pid' "$log")" = 3 ] || bad "not 3 workers done"
  ! grep -q "blacklisted\|failed" "$log" || bad "a failure while adding a host"

  echo "=== removed: the discovery script drops 10.77.0.2"
  printf '10.77.0.1:2\n10.77.0.2:1\n' > "$work/hosts"
  start --min-np 2 --max-np 3 --discovery-interval 0.5 --host-discovery-script "$work/discover.sh" -- 80
  if wait_for "] gen 0 rank 2 size 3 step 10 " 1; then
    on_host2 "$(pid_of 0 2)" || bad "rank 2 does not run on host 2"
    printf '10.77.0.1:2\n' > "$work/hosts"
  fi
  finish || bad "kolorun exited with status $? (expected 0)"
  has "generation 1 (the hosts changed): 2 workers: id 0 on 10.77.0.1, id 1 on 10.77.0.1"
  has "^\[2\] removed$" "the worker on host 2 did not find itself removed"
  has "kolorun: rank 2 (host 10.77.0.2) exited normally (it was no longer in the plan)"
  ! grep -q "blacklisted\|did not leave" "$log" || bad "the removed worker was a failure or was stopped"
  sums_ok 1 2
  for r in 0 1; do same_process 0 $r 1 $r; done
  [ "$(grep -c '] done pid' "$log")" = 2 ] || bad "not 2 workers done"
}

fashion_mnist() {
  export KOLO_PEER_TIMEOUT_SECONDS=30 KOLO_STALL_SHUTDOWN_SECONDS=120 OMP_NUM_THREADS=1
  local images=12000 epochs=3
  local common=(--elastic --epochs "$epochs" --train-limit "$images" --commit-every 10
                --batch-size 32 --no-progress)
  field() { tr -d ' \n' < "$2" | sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p"; }
  # The pid of the worker with elastic id $1 (its log's first line).
  fm_pid() { sed -n 's/^start pid \([0-9]*\)$/\1/p' "$work/log.$1" 2> /dev/null | head -1; }
  echo "=== fashion_mnist: an uninterrupted run of 4 workers on host 1, for the accuracy"
  timeout 400 "$hosts" run "$kolorun" --min-np 1 --max-np 4 -np 4 "$worker" "${common[@]}" \
    --summary-json "$work/ref.json" > "$log" 2>&1 || { cat "$log"; bad "the reference run"; return; }
  local ref
  ref=$(field test_accuracy "$work/ref.json")
  echo "=== fashion_mnist: 2 + 2 workers, kill -9 of one on host 2 mid-epoch"
  timeout 400 "$hosts" run "$kolorun" --ssh-config "$work/keys/ssh_config" --min-np 1 \
    --max-np 4 -np 4 -H 10.77.0.1:2,10.77.0.2:2 "$worker" "${common[@]}" \
    --elastic-log "$work/log" --summary-json "$work/run.json" > "$log" 2>&1 &
  job=$!
  local n=0
  for _ in $(seq 1200); do  # 45 steps of worker 0: mid-epoch 1 (93 steps), between commits
    n=$(grep -c '^batch' "$work/log.0" 2> /dev/null)
    [ "${n:-0}" -ge 45 ] && break
    sleep 0.1
  done
  local victim survivors=()
  victim=$(fm_pid 3)
  for id in 0 1 2; do survivors+=("$(fm_pid $id)"); done
  if [ "${n:-0}" -ge 45 ] && [ -n "$victim" ]; then
    on_host2 "$victim" || bad "worker 3 (pid $victim) does not run on host 2"
    on_host2 "${survivors[2]}" || bad "worker 2 does not run on host 2"
    kill -9 "$victim"
    echo "killed worker 3 (pid $victim) after $n steps of worker 0"
  else
    bad "worker 0 did not train 45 steps within 120 s"
  fi
  finish || bad "kolorun exited with status $? (expected 0)"
  has "kolorun: rank 3 (host 10.77.0.2) was killed by signal 9"
  for id in 0 1 2; do
    grep -q "^done pid ${survivors[$id]}$" "$work/log.$id" ||
      bad "worker $id did not finish in its first process (pid ${survivors[$id]})"
    [ "$(grep -c '^start pid' "$work/log.$id")" = 1 ] || bad "worker $id was started again"
  done
  grep -q "^synced 1 .* 3 " "$work/log.0" || bad "no generation 1 of 3 workers"
  "$count" "$images" "$epochs" "$work"/log.* || bad "samples trained on twice or never"
  local acc
  acc=$(field test_accuracy "$work/run.json")
  echo "test accuracy: $acc with a worker on host 2 killed, $ref uninterrupted"
  awk -v a="$acc" -v r="$ref" 'BEGIN { exit !(a >= r - 0.01) }' ||
    bad "accuracy $acc is more than 0.01 below the uninterrupted run's $ref"
}

case $mode in
  core) core ;;
  fashion_mnist) fashion_mnist ;;
  *) bad "unknown mode $mode" ;;
esac
[ $status = 0 ] && echo PASS
exit $status
