"""Rows of the fault suite about cohortd under hostile clients, disks and files (issue 27): restarts
of a large or often-killed --data-dir store, its /metrics endpoint under slow, flooding and
descriptor-starved clients, flooders of the token handshake, a full store (--max-memory), token
files that are not files, and a damaged log accepted twice.

run_faults.py imports this module where its rows belong in the table; the rows register themselves
with its @scenario and use its helpers."""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from run_faults import (authenticated, current_dialect, polite_set_get, raise_nofile, recv_exact,
                        row, scenario, start_cohortd, status_kib, wire_bytes)


def set_request(key, value):
    return b"\x01" + wire_bytes(key) + wire_bytes(value)  # SET (no reply)


def get_value(c, key):
    c.sendall(b"\x03" + wire_bytes(key))  # GET
    n = int.from_bytes(recv_exact(c, 8), "little")
    return recv_exact(c, n)


def is_set(c, key):
    c.sendall(b"\x05" + (1).to_bytes(8, "little") + wire_bytes(key))  # CHECK: 0 when set
    return recv_exact(c, 1) == b"\x00"


def stop(s, timeout=20):
    s.send_signal(signal.SIGTERM)
    _, err = s.communicate(timeout=timeout)
    return err.decode() if isinstance(err, bytes) else (err or "")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


# ---- token files that are not files ---------------------------------------------------------------

@scenario("token files that are a FIFO, /dev/zero, 200 MB", "input")
def token_file_kinds(ctx):
    fifo = os.path.join(ctx.dir, "fifo")
    os.mkfifo(fifo)
    big = os.path.join(ctx.dir, "big")
    with open(big, "wb") as f:
        f.truncate(200 << 20)  # sparse: costs no disk
    os.chmod(big, 0o600)
    commands = {
        "cohortd": lambda f: [ctx.path("cohortd"), "--host", "127.0.0.1", "--port", "0",
                              "--auth-token-file", f],
        "cohortctl": lambda f: [ctx.path("cohortctl"), "status", "--store", "127.0.0.1:1",
                                "--token-file", f],
        "cohortrun": lambda f: [ctx.path("cohortrun"), "--standalone", "--nproc-per-node", "1",
                                "--auth-token-file", f, "--no-python", "/bin/true"],
    }
    bad, slowest, seen = [], 0.0, ""
    for name, argv in commands.items():
        for f in (fifo, "/dev/zero", big):
            try:
                p, took = ctx.run(argv(f), timeout=5)
                slowest = max(slowest, took)
                if p.returncode != 2 or f not in p.stderr:
                    bad.append(f"{name} {os.path.basename(f)}: exit {p.returncode}")
                elif not seen:
                    seen = p.stderr.strip().splitlines()[-1]
            except subprocess.TimeoutExpired:
                bad.append(f"{name} {os.path.basename(f)}: still running after 5 s")
    ok = not bad
    return row(slowest, seen[:110] if ok else "; ".join(bad)[:110], "n/a", "nothing", ok,
               "cohortd, cohortctl and cohortrun read a token file only when it is a regular file "
               "(symbolic links to one are followed: mounted secrets are links) of at most 64 KiB, "
               "opened without blocking: each exits 2 at once naming the file and what it is (a "
               "FIFO hung all three; /dev/zero ended in bad_alloc; 200 MB was taken as a token)")
