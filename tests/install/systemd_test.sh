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
for want in '^Type=notify$' '^NotifyAccess=main$' '^StateDirectory=cohortd$' '^Environment=COHORTD_DATA_DIR=/var/lib/cohortd$' \
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
# The token drop-in the unit's comment gives (LoadCredential and %d), verified with the unit.
mkdir -p "$work/cohortd.service.d"
sed -n 's/^#   \(\[Service\]\|LoadCredential=.*\|Environment=COHORTD_AUTH_TOKEN_FILE=.*\)$/\1/p' "$unit" \
  >"$work/cohortd.service.d/token.conf"
[[ $(grep -c . "$work/cohortd.service.d/token.conf") == 3 ]] ||
  { echo "the unit's comment gives no token drop-in: $(cat "$work/cohortd.service.d/token.conf")" >&2; exit 1; }
MANPATH=$build/man systemd-analyze verify "$work/cohortd.service" >"$work/verify-dropin.log" 2>&1 ||
  { cat "$work/verify-dropin.log" >&2; exit 1; }
if [[ -s $work/verify-dropin.log ]]; then
  echo "systemd-analyze verify complained about the token drop-in:" >&2
  cat "$work/verify-dropin.log" >&2
  exit 1
fi

# The notify protocol Type=notify relies on, spoken by the build's cohortd: READY=1 with its address
# on the socket NOTIFY_SOCKET names (a path, then an abstract @name: systemd uses both), once
# the port file is written and a connection is accepted; STOPPING=1 on SIGTERM. A socket nobody
# listens on is warned about and cohortd serves anyway.
python3 - "$build/bin/cohortd" "$work" <<'PY' || { echo "the notify protocol failed (above)" >&2; exit 1; }
import os, select, signal, socket, subprocess, sys, time
cohortd, work = sys.argv[1], sys.argv[2]
portfile = os.path.join(work, "notify.port")

def start(notify_socket):
    if os.path.exists(portfile):
        os.unlink(portfile)
    env = dict(os.environ, NOTIFY_SOCKET=notify_socket)
    return subprocess.Popen([cohortd, "--host", "127.0.0.1", "--port", "0", "--port-file", portfile],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()

for name in (os.path.join(work, "notify.sock"), "@cohort-notify-test-%d" % os.getpid()):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name[1:] if name.startswith("@") else name)
    s.settimeout(20)
    p = start(name)
    try:
        msg = s.recv(4096).decode()
        fields = dict(line.split("=", 1) for line in msg.split("\n") if line)
        assert fields.get("READY") == "1", "no READY=1 in %r" % msg
        with open(portfile) as f:
            port = f.read().strip()
        assert fields.get("STATUS") == "listening on 127.0.0.1:" + port, msg
        socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()
        p.send_signal(signal.SIGTERM)
        msg = s.recv(4096).decode()
        assert msg == "STOPPING=1", "after SIGTERM: %r" % msg
        assert p.wait(timeout=20) == 0, "cohortd exited %s" % p.returncode
    finally:
        stop(p)
        s.close()
    print("systemd_test: notify ok (%s)" % name)

p = start(os.path.join(work, "nobody-listens.sock"))
try:
    deadline, err = time.monotonic() + 20, ""
    while "cannot tell the service manager" not in err:
        left = deadline - time.monotonic()
        assert left > 0 and select.select([p.stderr], [], [], left)[0], \
            "no warning about the unusable NOTIFY_SOCKET: %r" % err
        chunk = os.read(p.stderr.fileno(), 4096).decode()  # unbuffered, unlike readline
        assert chunk, "cohortd ended: %r" % err
        err += chunk
    with open(portfile) as f:
        socket.create_connection(("127.0.0.1", int(f.read())), timeout=5).close()
finally:
    stop(p)
print("systemd_test: an unusable NOTIFY_SOCKET is warned about, cohortd serves")
PY
echo "systemd_test: passed"
