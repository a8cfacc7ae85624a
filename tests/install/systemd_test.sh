#!/usr/bin/env bash
# ctest systemd.unit (label packaging): `systemd-analyze verify` on the cohortd.service the build
# generated, offline (no running systemd needed). The unit names the installed cohortd and its man
# page; verify checks that both exist, so the copy checked here points at the build's cohortd and
# the build's man pages. Also: the settings the unit relies on are there.
#   systemd_test.sh <build dir> <work dir>
set -euo pipefail
build=$(realpath "$1") work=$2
rm -rf "$work"
mkdir -p "$work"
unit=$build/cohortd.service
[[ -f $unit ]] || { echo "no $unit" >&2; exit 1; }
for want in '^Type=simple$' '^StateDirectory=cohortd$' '^Environment=COHORTD_DATA_DIR=/var/lib/cohortd$' \
            '^LimitNOFILE=131072$' '^DynamicUser=yes$' '^ProtectSystem=strict$' '^NoNewPrivileges=yes$' \
            '^ExecStart=/.*/cohortd$'; do
  grep -qE "$want" "$unit" || { echo "cohortd.service lacks $want" >&2; exit 1; }
done
# LimitNOFILE must cover the default connection limit.
max_conn=$("$build/bin/cohortd" --help | sed -n 's/.*--max-connections N=\([0-9]*\).*/\1/p')
nofile=$(sed -n 's/^LimitNOFILE=//p' "$unit")
((nofile > max_conn)) || { echo "LimitNOFILE=$nofile does not exceed --max-connections $max_conn" >&2; exit 1; }
sed "s|^ExecStart=.*/cohortd|ExecStart=$build/bin/cohortd|" "$unit" >"$work/cohortd.service"
# verify exits 0 on settings it ignores ("Failed to parse ..., ignoring"): any message fails.
MANPATH=$build/man systemd-analyze verify "$work/cohortd.service" >"$work/verify.log" 2>&1 ||
  { cat "$work/verify.log" >&2; exit 1; }
if [[ -s $work/verify.log ]]; then
  echo "systemd-analyze verify complained:" >&2
  cat "$work/verify.log" >&2
  exit 1
fi
echo "systemd_test: passed"
