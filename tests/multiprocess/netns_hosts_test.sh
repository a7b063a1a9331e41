#!/usr/bin/env bash
# The runtime across two "hosts" made of network namespaces (scripts/netns_hosts.sh): MPI
# daemons on separate nodes talking TCP over a bridge, kolo's hierarchical transport
# required (KOLO_HIERARCHICAL=1): every collective of mp_worker, then autotune measuring
# hierarchical against flat allreduce. Skipped (exit 77) where namespaces cannot be made
# (not root, no iproute2, a sandbox without them).
#
#   netns_hosts_test.sh MP_WORKER KOLORUN
set -uo pipefail
worker=$1 kolorun=$2
hosts=$(dirname "$0")/../../scripts/netns_hosts.sh
if [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null || ! command -v unshare > /dev/null; then
  echo "skipped: needs root, ip and unshare"
  exit 77
fi
"$hosts" down > /dev/null 2>&1
if ! "$hosts" up 2 > /dev/null 2>&1; then
  "$hosts" down > /dev/null 2>&1
  echo "skipped: cannot create network namespaces here"
  exit 77
fi
trap '"$hosts" down > /dev/null 2>&1' EXIT
log=$(mktemp)
status=0
KOLO_HIERARCHICAL=1 KOLO_LOG_LEVEL=info timeout 240 "$hosts" run "$kolorun" -np 4 \
  -H 10.77.0.1:2,10.77.0.2:2 "$worker" collectives > "$log" 2>&1 || status=1
cat "$log"
[ "$(grep -c 'hierarchical transport: 2 hosts x 2 ranks' "$log")" = 4 ] || { echo "FAIL: not hierarchical on every rank"; status=1; }
[ "$(grep -c 'collectives OK' "$log")" = 4 ] || { echo "FAIL: collectives"; status=1; }
csv=$(mktemp)
KOLO_AUTOTUNE=1 KOLO_AUTOTUNE_WARMUP_SAMPLES=1 KOLO_AUTOTUNE_CYCLES_PER_SAMPLE=5 \
  KOLO_AUTOTUNE_LOG=$csv timeout 240 "$hosts" run "$kolorun" -np 4 \
  -H 10.77.0.1:2,10.77.0.2:2 "$worker" autotune > "$log" 2>&1 || status=1
cat "$log"
grep -q 'autotune log: [0-9]* hierarchical samples, [0-9]* flat, settled' "$log" || { echo "FAIL: autotune"; status=1; }
rm -f "$log" "$csv"
exit $status
