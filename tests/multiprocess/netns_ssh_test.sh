#!/usr/bin/env bash
# kolorun's own launcher across two "hosts" made of network namespaces
# (scripts/netns_hosts.sh), each remote worker started through a real sshd (Debian's
# openssh-server, keys made here): the runtime over Gloo with the hierarchical transport
# on (shm inside a host, Gloo across) and off (Gloo alone), every collective of mp_worker,
# and a worker killed on the remote host named by rank. Skipped (exit 77) where namespaces
# cannot be made or sshd is missing.
#
#   netns_ssh_test.sh MP_WORKER KOLORUN
set -uo pipefail
worker=$1 kolorun=$2
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
keys=$(mktemp -d)
log=$(mktemp)
trap '"$hosts" down > /dev/null 2>&1; rm -rf "$keys" "$log"' EXIT
"$hosts" sshd 2 "$keys" || { echo "FAIL: cannot start sshd on host 2"; exit 1; }
status=0
run() {  # run HIER ARGS...: kolorun on host 1 with workers on both hosts
  local hier=$1
  shift
  KOLO_HIERARCHICAL=$hier KOLO_LOG_LEVEL=info KOLO_PEER_TIMEOUT_SECONDS=20 timeout 120 \
    "$hosts" run "$kolorun" --ssh-config "$keys/ssh_config" -np 4 -H 10.77.0.1:2,10.77.0.2:2 \
    "$worker" "$@" > "$log" 2>&1
}
count() { grep -c "$1" "$log"; }

run 1 collectives || status=1
cat "$log"
[ "$(count 'hierarchical transport: 2 hosts x 2 ranks (shared memory inside a host, gloo across)')" = 4 ] ||
  { echo "FAIL: not hierarchical over gloo on every rank"; status=1; }
[ "$(count 'collectives OK')" = 4 ] || { echo "FAIL: collectives (hierarchical)"; status=1; }
for r in 2 3; do
  grep -q "^\[$r\] topology\|^\[$r\] rank $r of 4" "$log" || { echo "FAIL: no output from remote rank $r"; status=1; }
done

run 0 collectives || status=1
cat "$log"
[ "$(count 'hierarchical transport')" = 0 ] || { echo "FAIL: hierarchical with KOLO_HIERARCHICAL=0"; status=1; }
[ "$(count 'collectives OK')" = 4 ] || { echo "FAIL: collectives (gloo alone)"; status=1; }

# Rank 3 (on host 2) kills itself: kolorun names it and its host, the survivors name it.
run 0 die
rc=$?
cat "$log"
[ $rc != 0 ] || { echo "FAIL: a dead worker did not fail the job"; status=1; }
grep -q "kolorun: rank 3 (host 10.77.0.2) was killed by signal 9" "$log" ||
  { echo "FAIL: kolorun did not name rank 3 on 10.77.0.2 killed by SIGKILL"; status=1; }
[ "$(grep -c 'peer failure after .*rank 3' "$log")" -ge 3 ] ||
  { echo "FAIL: the survivors did not all name rank 3"; status=1; }
[ $status = 0 ] && echo PASS
exit $status
