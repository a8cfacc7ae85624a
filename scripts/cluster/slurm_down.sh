#!/usr/bin/env bash
# Stop the cluster started by slurm_up.sh and remove $COHORT_SLURM_DIR.
# Idempotent: does nothing (exit 0) if nothing is running.
# Only processes recorded in $COHORT_SLURM_DIR (pid files, step sockets) are signalled.
# Env: COHORT_SLURM_DIR=/tmp/cohort-slurm, COHORT_SLURM_KEEP=1 keeps the directory (logs) after stopping.
set -uo pipefail

B=${COHORT_SLURM_DIR:-/tmp/cohort-slurm}
T0=$(date +%s.%N)
log() { echo "[slurm_down] $*"; }
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }

if [ ! -d "$B" ]; then log "nothing to stop ($B absent)"; exit 0; fi
export SLURM_CONF=$B/slurm.conf

pid_of() { [ -f "$1" ] && cat "$1" 2>/dev/null; }
# alive PID: exists and is not a zombie
alive() {
  local s; [ -n "${1:-}" ] || return 1
  s=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$s" ] && [ "${s#Z}" = "$s" ]
}

# pids we own: daemons from pid files
PIDS=()
for f in "$B"/run/slurmctld.pid "$B"/run/slurmd-*.pid; do
  p=$(pid_of "$f") || continue; alive "$p" && PIDS+=("$p")
done

# slurmstepd processes of this cluster: the ones holding sockets in our spool dirs
step_pids() {
  local s
  for s in "$B"/spool/*/*_*.*; do
    [ -S "$s" ] && fuser "$s" 2>/dev/null
  done | tr -s ' ' '\n' | grep -E '^[0-9]+$' | sort -u
}

# wait_gone TENTHS [extra pids...]: wait until all of PIDS (+extra) have exited
wait_gone() {
  local n=$1; shift
  for _ in $(seq 1 "$n"); do
    local still=0 p
    for p in "${PIDS[@]}" "$@"; do alive "$p" && still=1; done
    [ $still = 0 ] && return 0; sleep 0.1
  done
  return 1
}

ctld=$(pid_of "$B/run/slurmctld.pid" || true)
if alive "$ctld" && [ -f "$SLURM_CONF" ]; then
  jobs=$(timeout 5 squeue -h -o %A 2>/dev/null || true)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    timeout 5 scancel $jobs 2>/dev/null || true
    for _ in $(seq 1 100); do                       # up to 10 s for jobs to end
      [ -z "$(timeout 5 squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.1
    done
  fi
  timeout 10 scontrol shutdown >/dev/null 2>&1 || true
  wait_gone 100                                     # up to 10 s for a clean exit
fi
# whatever is left (slurmctld was dead, or shutdown hung): TERM, then KILL
STEPS=$(step_pids)
for p in "${PIDS[@]}" $STEPS; do alive "$p" && kill -TERM "$p" 2>/dev/null; done
wait_gone 50 $STEPS
for p in "${PIDS[@]}" $STEPS; do alive "$p" && kill -KILL "$p" 2>/dev/null; done

# munged last (slurm daemons talk to it while shutting down)
m=$(pid_of "$B/run/munged.pid" || true)
if alive "$m"; then
  munged -s --socket="$B/munge/munge.socket.2" >/dev/null 2>&1 || kill -TERM "$m" 2>/dev/null
  for _ in $(seq 1 50); do alive "$m" || break; sleep 0.1; done
  alive "$m" && kill -KILL "$m" 2>/dev/null
fi

if [ "${COHORT_SLURM_KEEP:-0}" = 1 ]; then
  log "stopped in $(elapsed)s; kept $B"
else
  rm -rf "$B"
  log "stopped in $(elapsed)s; removed $B"
fi
