#!/usr/bin/env bash
# run_ranks.sh N PROGRAM ARGS...: starts N processes of PROGRAM as one job without kolorun
# (until kolorun's launcher runs the transport checks): each gets KOLO_RANK, KOLO_SIZE,
# KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE, KOLO_RENDEZVOUS_ADDR=127.0.0.1:PORT (a free port; rank
# 0 serves the store there) and KOLO_HOST_ADDR=127.0.0.1. Exits 0 only when every process
# does; the kill tests read their verdict from the output instead (PASS lines).
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 N PROGRAM [ARGS...]" >&2
  exit 2
fi
n=$1
shift
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for ((r = 0; r < n; r++)); do
  KOLO_RANK=$r KOLO_SIZE=$n KOLO_LOCAL_RANK=$r KOLO_LOCAL_SIZE=$n \
    KOLO_RENDEZVOUS_ADDR=127.0.0.1:$port KOLO_HOST_ADDR=127.0.0.1 "$@" &
  pids+=($!)
done
status=0
for ((r = 0; r < n; r++)); do
  if ! wait "${pids[$r]}"; then
    echo "run_ranks.sh: rank $r failed" >&2
    status=1
  fi
done
exit $status
