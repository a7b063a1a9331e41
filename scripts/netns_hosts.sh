#!/usr/bin/env bash
# Several "hosts" on one machine, for running kolo across hosts without other machines:
# each host is a network namespace kolo-hK with address 10.77.0.K/24 on a bridge, and every
# command started "on" it also gets its own UTS namespace with hostname kolo-hK. MPI then
# sees separate nodes (its daemons reach each other over TCP through the bridge), and kolo
# picks its hierarchical transport (shared memory inside a host, Gloo or MPI across hosts). Needs
# root and iproute2. The shared memory of the "hosts" is still one /dev/shm, which kolo's
# per-job segment names keep apart.
#
#   scripts/netns_hosts.sh up N        create hosts 1..N (10.77.0.1 .. 10.77.0.N)
#   scripts/netns_hosts.sh run CMD...  run CMD on host 1 with OpenMPI told to start remote
#                                      daemons through this script, e.g.
#       scripts/netns_hosts.sh run build/bin/kolorun -np 4 -H 10.77.0.1:2,10.77.0.2:2 PROG
#   scripts/netns_hosts.sh sshd K DIR  start an sshd on host K (10.77.0.K:22) that accepts
#                                      the key DIR/id_ed25519 (made, with DIR/ssh_config,
#                                      on first use; openssh-server must be installed), so
#                                      `ssh -F DIR/ssh_config 10.77.0.K CMD` runs CMD there
#   scripts/netns_hosts.sh down        remove every kolo-h* namespace and the bridge (and
#                                      stop the sshds started here)
#
# As OpenMPI's launch agent (plm_rsh_agent) it is called with "10.77.0.K COMMAND..." and
# runs COMMAND on host K.
set -euo pipefail
self=$(realpath "$0")
bridge=kolo-br0

on_host() {  # on_host K CMD...: CMD in host K's network and UTS namespaces
  local k=$1
  shift
  exec ip netns exec "kolo-h$k" unshare --uts sh -c 'hostname "$0"; exec "$@"' "kolo-h$k" "$@"
}

case ${1:-} in
  10.77.0.*)  # launch agent: "10.77.0.K remote command line"
    k=${1##*.}
    shift
    on_host "$k" sh -c "$*"
    ;;
  up)
    n=${2:?usage: $0 up N}
    ip link add "$bridge" type bridge
    ip link set "$bridge" up
    for k in $(seq "$n"); do
      ip netns add "kolo-h$k"
      ip link add "kolo-v$k" type veth peer name eth0 netns "kolo-h$k"
      ip link set "kolo-v$k" master "$bridge" up
      ip -n "kolo-h$k" addr add "10.77.0.$k/24" dev eth0
      ip -n "kolo-h$k" link set eth0 up
      ip -n "kolo-h$k" link set lo up
    done
    ;;
  run)
    shift
    export OMPI_MCA_plm_rsh_agent=$self
    export OMPI_MCA_btl_tcp_if_include=10.77.0.0/24
    export OMPI_MCA_oob_tcp_if_include=10.77.0.0/24
    on_host 1 "$@"
    ;;
  sshd)
    k=${2:?usage: $0 sshd K DIR}
    dir=$(realpath "${3:?usage: $0 sshd K DIR}")
    mkdir -p "$dir" /run/sshd
    chmod 700 "$dir"
    [ -f "$dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/id_ed25519"
    [ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_ed25519"
    cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
    cat > "$dir/sshd_config_$k" <<CONF
ListenAddress 10.77.0.$k
HostKey $dir/host_ed25519
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $dir/sshd_$k.pid
AcceptEnv KOLO_*
CONF
    cat > "$dir/ssh_config" <<CONF
Host 10.77.0.*
  IdentityFile $dir/id_ed25519
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
CONF
    # sshd daemonizes; the namespaces keep it on host K (network) with hostname kolo-hK.
    ip netns exec "kolo-h$k" unshare --uts sh -c 'hostname "$0"; exec /usr/sbin/sshd -f "$1"' \
      "kolo-h$k" "$dir/sshd_config_$k"
    echo "$dir/sshd_$k.pid" >> "/run/kolo-netns-sshd.pids"
    ;;
  down)
    if [ -f /run/kolo-netns-sshd.pids ]; then
      while read -r pidfile; do
        [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
      done < /run/kolo-netns-sshd.pids
      rm -f /run/kolo-netns-sshd.pids
    fi
    for ns in $(ip netns list | awk '/^kolo-h[0-9]+/ {print $1}'); do ip netns delete "$ns"; done
    ip link delete "$bridge" 2>/dev/null || true
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
    ;;
esac
