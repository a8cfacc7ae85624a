#!/usr/bin/env bash
# Stop the etcd started by etcd_up.sh (pid file only) and remove $COHORT_ETCD_DIR.
# Idempotent. COHORT_ETCD_KEEP=1 keeps the directory (log + data).
set -uo pipefail
B=${COHORT_ETCD_DIR:-/tmp/cohort-etcd}
T0=$(date +%s.%N)
log() { echo "[etcd_down] $*"; }
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
alive() {
  local s; [ -n "${1:-}" ] || return 1
  s=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$s" ] && [ "${s#Z}" = "$s" ]
}
[ -d "$B" ] || { log "nothing to stop ($B absent)"; exit 0; }
p=$(cat "$B/etcd.pid" 2>/dev/null || true)
if alive "$p" && tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q -- "--data-dir $B/data"; then
  kill -TERM "$p"
  for _ in $(seq 1 100); do alive "$p" || break; sleep 0.1; done
  alive "$p" && kill -KILL "$p"
fi
if [ "${COHORT_ETCD_KEEP:-0}" = 1 ]; then log "stopped in $(elapsed)s; kept $B"
else rm -rf "$B"; log "stopped in $(elapsed)s; removed $B"; fi
