#!/usr/bin/env bash
# (Copy of ../shared/infra/netns_down.sh, carried by the project.)
# Remove what netns_up.sh made: processes still inside our namespaces (found with
# `ip netns pids`, i.e. only processes in those namespaces), the namespaces, and the guard route.
# Idempotent. Env: NETNS_CI_PREFIX=ci  NETNS_CI_SUBNET=10.77.0
set -uo pipefail
P=${NETNS_CI_PREFIX:-ci}
S=${NETNS_CI_SUBNET:-10.77.0}
T0=$(date +%s.%N)
log() { echo "[netns_down] $*"; }
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }

mapfile -t NSS < <(ip netns list | awk '{print $1}' | grep -E "^$P-(sw|n[0-9]+)$" || true)
pids() { local ns; for ns in "${NSS[@]}"; do ip netns pids "$ns" 2>/dev/null; done; }
if [ ${#NSS[@]} -gt 0 ]; then
  for p in $(pids); do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 1 30); do [ -z "$(pids)" ] && break; sleep 0.1; done
  for p in $(pids); do kill -KILL "$p" 2>/dev/null; done
  for ns in "${NSS[@]}"; do ip netns del "$ns" 2>/dev/null || log "could not delete $ns"; done
fi
# guard route added by netns_up.sh (only if it is exactly ours)
if ip route show "$S.0/24" 2>/dev/null | grep -q '^unreachable'; then
  ip route del unreachable "$S.0/24"
fi
log "removed ${#NSS[@]} namespaces in $(elapsed)s"
