#!/usr/bin/env bash
# Start a single-member etcd (Debian etcd-server 3.4.x) on 127.0.0.1, data in $COHORT_ETCD_DIR.
# Idempotent: exits 0 at once if our etcd is already running and healthy.
# Env (optional):
#   COHORT_ETCD_DIR=/tmp/cohort-etcd   COHORT_ETCD_PORT=23790 (client)   COHORT_ETCD_PEER_PORT=23800
#   COHORT_ETCD_FAST=1   heartbeat 10 ms / election timeout 100 ms (single member elects itself
#                    in ~0.1 s instead of ~1 s); 0 = etcd defaults (100 ms / 1000 ms)
#   COHORT_ETCD_INSTALL=1  apt-get install etcd-server etcd-client if etcd is missing
#   COHORT_ETCD_NETNS=ci-n1 COHORT_ETCD_HOST=10.77.0.1   run etcd inside a namespace made by
#                    netns_up.sh, listening on that node's address (clients in other node
#                    namespaces reach it; the root namespace does not)
# Afterwards: source "$COHORT_ETCD_DIR/env.sh"  (exports ETCD_ENDPOINT=http://127.0.0.1:PORT,
#             ETCDCTL_API=3, ETCDCTL_ENDPOINTS)
set -euo pipefail
B=${COHORT_ETCD_DIR:-/tmp/cohort-etcd}
PORT=${COHORT_ETCD_PORT:-23790}
PEER=${COHORT_ETCD_PEER_PORT:-23800}
HOST=${COHORT_ETCD_HOST:-127.0.0.1}
NS=${COHORT_ETCD_NETNS:-}
EP=http://$HOST:$PORT
# run a command in etcd's namespace (or here)
inns() { if [ -n "$NS" ]; then ip netns exec "$NS" "$@"; else "$@"; fi; }
T0=$(date +%s.%N)
log() { echo "[etcd_up] $*"; }
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
alive() {
  local p s; [ -f "$1" ] && p=$(cat "$1") && [ -n "$p" ] || return 1
  s=$(ps -o stat= -p "$p" 2>/dev/null) && [ -n "$s" ] && [ "${s#Z}" = "$s" ]
}

if ! command -v etcd >/dev/null; then
  if [ "${COHORT_ETCD_INSTALL:-1}" = 1 ]; then
    log "installing etcd-server etcd-client from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      etcd-server etcd-client >/dev/null
  else
    log "etcd not installed and COHORT_ETCD_INSTALL=0"; exit 1
  fi
fi

write_env() {
  cat > "$B/env.sh" <<EOF
export ETCD_ENDPOINT=$EP
export ETCDCTL_API=3
export ETCDCTL_ENDPOINTS=$EP
EOF
}

if alive "$B/etcd.pid" && inns curl -sf -m 2 "$EP/health" | grep -q '"health":"true"'; then
  write_env; log "already up ($(elapsed)s) at $EP"; exit 0
fi
# half-up leftovers: stop and start clean
[ -d "$B" ] && COHORT_ETCD_DIR=$B "$(dirname "${BASH_SOURCE[0]}")/etcd_down.sh" >/dev/null 2>&1 || true

mkdir -p "$B"
write_env
TUNE=()
if [ "${COHORT_ETCD_FAST:-1}" = 1 ]; then TUNE=(--heartbeat-interval 10 --election-timeout 100); fi
# setsid: own session, so the CI shell's job control / SIGHUP does not reach it
setsid ${NS:+ip netns exec "$NS"} etcd --name ci --data-dir "$B/data" \
  --listen-client-urls "$EP" --advertise-client-urls "$EP" \
  --listen-peer-urls "http://$HOST:$PEER" --initial-advertise-peer-urls "http://$HOST:$PEER" \
  --initial-cluster "ci=http://$HOST:$PEER" --initial-cluster-state new \
  --initial-cluster-token ci-token "${TUNE[@]}" \
  --logger zap --log-outputs stderr \
  </dev/null >"$B/etcd.log" 2>&1 &
echo $! > "$B/etcd.pid"

for _ in $(seq 1 300); do           # up to 30 s
  if inns curl -sf -m 1 "$EP/health" 2>/dev/null | grep -q '"health":"true"'; then
    log "up in $(elapsed)s at $EP${NS:+ in netns $NS} (pid $(cat "$B/etcd.pid")); source $B/env.sh"; exit 0
  fi
  alive "$B/etcd.pid" || break
  sleep 0.05
done
log "FAILED to become healthy"; tail -n 20 "$B/etcd.log"; exit 1
