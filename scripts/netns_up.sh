#!/usr/bin/env bash
# (Copy of ../shared/infra/netns_up.sh, carried by the project; used by the multi-host tests.)
# Simulated nodes: N network namespaces ${P}-n1..${P}-nN, each with an "eth0" (veth) plugged
# into a bridge br0 that lives in its own namespace ${P}-sw (the "switch"). Node i has
# ${SUBNET}.i/24. Nothing is attached to the root namespace: the nodes reach only each other.
# Run a process "on node i" with:  ip netns exec ${P}-n$i CMD...
# Idempotent: exits 0 at once if the topology is already there; otherwise (re)builds it.
# Env (optional): NETNS_CI_NODES=2  NETNS_CI_PREFIX=ci  NETNS_CI_SUBNET=10.77.0
#   NETNS_CI_GUARD=1  add "unreachable ${SUBNET}.0/24" in the root namespace, so a test that
#                     wrongly targets a node address from the root namespace fails at once
#                     (EHOSTUNREACH) instead of leaving through the default route.
set -euo pipefail
N=${NETNS_CI_NODES:-2}
P=${NETNS_CI_PREFIX:-ci}
S=${NETNS_CI_SUBNET:-10.77.0}
T0=$(date +%s.%N)
log() { echo "[netns_up] $*"; }
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

[ "$N" -ge 1 ] && [ "$N" -le 250 ] || { log "NETNS_CI_NODES must be 1..250"; exit 1; }

present() {
  ip netns list | grep -qx "$P-sw\( (id: [0-9]*)\)\?" || return 1
  [ "$(ip -n "$P-sw" -o link show master br0 2>/dev/null | wc -l)" = "$N" ] || return 1
  local i
  for i in $(seq 1 "$N"); do
    ip -n "$P-n$i" -o addr show dev eth0 2>/dev/null | grep -q " $S.$i/24 " || return 1
  done
  # no extra node namespaces left from a bigger run
  ! ip netns list | grep -q "^$P-n$((N+1))\b"
}

if present; then log "already up ($(elapsed)s): $N nodes $P-n1..$P-n$N on $S.0/24"; exit 0; fi
NETNS_CI_NODES=$N NETNS_CI_PREFIX=$P NETNS_CI_SUBNET=$S "$HERE/netns_down.sh" >/dev/null 2>&1 || true

ip netns add "$P-sw"
ip -n "$P-sw" link set lo up
ip -n "$P-sw" link add br0 type bridge stp_state 0 forward_delay 0
ip -n "$P-sw" link set br0 up
for i in $(seq 1 "$N"); do
  ns=$P-n$i
  ip netns add "$ns"
  ip link add name eth0 netns "$ns" type veth peer name "p$i" netns "$P-sw"
  ip -n "$P-sw" link set "p$i" master br0
  ip -n "$P-sw" link set "p$i" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$S.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
done
if [ "${NETNS_CI_GUARD:-1}" = 1 ]; then
  ip route replace unreachable "$S.0/24"
fi

# wait for carrier on every node (veth + bridge come up in a few ms)
for i in $(seq 1 "$N"); do
  for _ in $(seq 1 100); do
    ip -n "$P-n$i" -o link show eth0 | grep -q 'state UP' && break; sleep 0.02
  done
done
if [ "$N" -ge 2 ] && command -v ping >/dev/null; then
  ip netns exec "$P-n1" ping -c1 -W2 "$S.2" >/dev/null \
    || { log "FAILED: $P-n1 cannot ping $S.2"; exit 1; }
fi
log "up in $(elapsed)s: $N nodes $P-n1..$P-n$N = $S.1..$S.$N/24 (switch ns $P-sw)"
